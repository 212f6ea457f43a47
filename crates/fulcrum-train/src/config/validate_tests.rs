//! Every range and conflict check of `validate.rs`: the key each refused override names.

use super::*;

/// The key an override's error names, and its message.
fn refused(set: &[&str]) -> (String, String) {
    let sets: Vec<String> = set.iter().map(|s| s.to_string()).collect();
    match Config::load(None, &sets) {
        Ok(_) => panic!("{set:?} was accepted"),
        Err(TrainError::ConfigKey { key, message, .. }) => (key, message),
        Err(other) => panic!("{set:?}: not a key error: {other}"),
    }
}

#[test]
fn every_check_names_exactly_the_key_at_fault() {
    for (set, key) in [
        (&["rollout.max_prompt_len=0"][..], "rollout.max_prompt_len"),
        (&["rollout.max_response_len=0"], "rollout.max_response_len"),
        (&["optim.beta2=1.5"], "optim.beta2"),
        (&["optim.beta1=-0.1"], "optim.beta1"),
        (&["optim.eps=0.0"], "optim.eps"),
        (&["optim.weight_decay=-1.0"], "optim.weight_decay"),
        (&["optim.grad_clip=nan"], "optim.grad_clip"),
        (&["optim.min_lr_ratio=2.0"], "optim.min_lr_ratio"),
        (&["dist.bucket_mb=0"], "dist.bucket_mb"),
        (&["dist.timeout_s=0"], "dist.timeout_s"),
        (&["rollout.engine_requests=0"], "rollout.engine_requests"),
        (
            &["rollout.engine_max_failures=0"],
            "rollout.engine_max_failures",
        ),
        (&["sft.batch_size=0"], "sft.batch_size"),
        (&["sft.micro_batch_size=0"], "sft.micro_batch_size"),
        (&["sft.lr=0.0"], "sft.lr"),
        (&["ppo.epochs=0"], "ppo.epochs"),
        (&["ppo.mini_batches=0"], "ppo.mini_batches"),
        (&["ppo.micro_batch_size=0"], "ppo.micro_batch_size"),
        (&["ppo.mini_batches=9"], "ppo.mini_batches"),
        (
            &["rollout.overlong_penalty=-1.0"],
            "rollout.overlong_penalty",
        ),
        (&["eval.prompts=0"], "eval.prompts"),
        (&["eval.k=0"], "eval.k"),
        (&["eval.temperature=-1.0"], "eval.temperature"),
        (&["task.difficulty=11"], "task.difficulty"),
        (&["task.mistake_rate=1.5"], "task.mistake_rate"),
        (&["task.tool_timeout_s=0"], "task.tool_timeout_s"),
        (&["task.tool_max_output=0"], "task.tool_max_output"),
        (&["rollout.max_turns=0"], "rollout.max_turns"),
        (
            &["eval.task={ name = \"arithmetic\", loop_length = 2 }"],
            "eval.task.loop_length",
        ),
    ] {
        let (got, message) = refused(set);
        assert_eq!(got, key, "{set:?}: {message}");
    }
}

#[test]
fn absurd_sizes_are_refused_with_the_key_and_the_limit() {
    for (set, key, limit) in [
        (
            "rollout.group_size=100000000",
            "rollout.group_size",
            MAX_SAMPLES_PER_PROMPT,
        ),
        (
            "rollout.prompts_per_step=100000000",
            "rollout.prompts_per_step",
            MAX_PROMPTS,
        ),
        (
            "rollout.max_response_len=100000000",
            "rollout.max_response_len",
            MAX_SEQUENCE_TOKENS,
        ),
        (
            "rollout.max_prompt_len=100000000",
            "rollout.max_prompt_len",
            MAX_SEQUENCE_TOKENS,
        ),
        (
            "ppo.micro_batch_size=100000000",
            "ppo.micro_batch_size",
            MAX_BATCH_SEQUENCES,
        ),
        (
            "sft.batch_size=100000000",
            "sft.batch_size",
            MAX_BATCH_SEQUENCES,
        ),
        (
            "sft.micro_batch_size=100000000",
            "sft.micro_batch_size",
            MAX_BATCH_SEQUENCES,
        ),
        ("eval.prompts=100000000", "eval.prompts", MAX_PROMPTS),
        ("eval.k=100000000", "eval.k", MAX_SAMPLES_PER_PROMPT),
        (
            "eval.greedy_prompts=100000000",
            "eval.greedy_prompts",
            MAX_PROMPTS,
        ),
        ("threads=100000000", "threads", MAX_THREADS),
        ("dist.bucket_mb=100000000", "dist.bucket_mb", MAX_BUCKET_MB),
        (
            "rollout.dynamic_sampling_max_draws=100000000",
            "rollout.dynamic_sampling_max_draws",
            MAX_DRAWS,
        ),
    ] {
        let (got, message) = refused(&[set]);
        assert_eq!(got, key, "{set}: {message}");
        assert!(message.contains(&limit.to_string()), "{set}: {message}");
    }
    // Each alone within bounds, together too many responses a step.
    let (got, message) = refused(&["rollout.prompts_per_step=60000", "rollout.group_size=4000"]);
    assert_eq!(got, "rollout.group_size");
    assert!(
        message.contains("rollout.prompts_per_step = 60000"),
        "{message}"
    );
    let (got, message) = refused(&["rollout.engine_timeout_s=1e30"]);
    assert_eq!(got, "rollout.engine_timeout_s", "{message}");
}
