#!/usr/bin/env bash
#! The real-model race: a GRPO step of the real-model preset (configs/real-rl-cpu.toml:
#! SmolLM2-135M-Instruct on chat arithmetic, 8 prompts x 8 responses of at most 64 tokens at
#! temperature 0.7, lr 1e-5, one epoch, no KL) in fulcrum and in TRL 1.16's GRPOTrainer
#! (loss_type="dapo", its own generation), both loading the same HF folder and taking the same
#! prompts in the same order, interleaved round by round in one invocation, same thread count.
#!
#!   bench/grpo_real.sh [ROUNDS (3)] [THREADS (cores)]
#!   STEPS=3 WARMUP=1: timed and untimed steps per side and round (untimed steps are the first).
#!   VARIANTS="default bf16 all-responses llamacpp": the fulcrum variants to run (default always).
#!   SLOTS=8: the llama.cpp server's slots (responses decoded together).
#!
#! fulcrum variants per round: `fulcrum train` at its defaults (native sampler, f32, the preset's
#! settings: equal-reward groups left out of the update, each prompt forwarded once per group),
#! the same in bf16, with every response trained as TRL does (ppo.skip_zero_weight = false,
#! ppo.share_prompt = false), and sampling on a local llama.cpp server (pushing the weights as f16
#! GGUF before every step). TRL with use_vllm needs a CUDA GPU: not run here.
#!
#! Before the rounds, the arithmetic check: TRL's first step's batch replayed through fulcrum's
#! update with rule = token must give TRL's gradient (bench/trl_grpo_real.py --check/--compare).
#! Every input is built deterministically and printed with its hash: the HF folder (converted
#! from the GGUF by `fulcrum convert`), the prompts (fulcrum's draw order for seed 0).
#! Ends with one JSON line: fulcrum_s_per_step, trl_s_per_step, ratio (TRL over fulcrum at its
#! defaults, medians over rounds), each variant's ratio, the check and the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
threads=${2:-$(nproc)}
steps=${STEPS:-3}
warmup=${WARMUP:-1}
out=target/bench-real
mkdir -p "$out"
. bench/machine.sh
before=$(machine_json)
echo "grpo_real: $(machine_line before)" >&2

./scripts/setup-libtorch.sh >&2
py=.venv/bin/python
if ! $py -c 'import datasets, safetensors, trl, transformers as t; assert (trl.__version__, t.__version__) == ("1.16.0", "5.24.0")' 2>/dev/null; then
    echo "grpo_real: installing trl 1.16.0 and transformers 5.24.0 into .venv" >&2
    $py -m pip install --quiet --disable-pip-version-check "trl==1.16.0" "transformers==5.24.0" >&2
fi
cargo build --quiet --release -p fulcrum -p fulcrum-train --bin fulcrum --example grpo-real-bench >&2
fulcrum=target/release/fulcrum
bench=target/release/examples/grpo-real-bench
gguf=assets/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$gguf" ] || $fulcrum fetch-assets --only smollm2 >&2
hf=$out/SmolLM2-135M-Instruct-f32
[ -f "$hf/model.safetensors" ] || $fulcrum convert "$gguf" "$hf" >&2
config=configs/real-rl-cpu.toml
prompts=$out/prompts.jsonl
$bench prompts --config "$config" --set seed=0 --steps $((warmup + steps)) --out "$prompts"
sha16() { sha256sum "$1" | cut -c1-16; }
echo "grpo_real: model $hf/model.safetensors sha256 $(sha16 "$hf/model.safetensors"), prompts sha256 $(sha16 "$prompts")" >&2

# The arithmetic check (once): TRL's batch and gradient, fulcrum's gradient of the same batch.
check=$out/check
rm -rf "$check"
$py bench/trl_grpo_real.py --check "$check" --model "$hf" --prompts "$prompts" --threads "$threads" >"$out/check-trl.log" 2>&1 \
    || { tail -20 "$out/check-trl.log" >&2; exit 1; }
replay=$($bench check --config "$config" --set "model.path=\"$hf\"" --set rule='"token"' --set "threads=$threads" \
    --batch "$check/batch.json" --out "$check/fulcrum_grads.safetensors")
grads=$($py bench/trl_grpo_real.py --compare "$check/trl_grads.safetensors" "$check/fulcrum_grads.safetensors")
echo "grpo_real: check: fulcrum replay $replay; gradients $grads" >&2
# The control: the same replay under `seq` (TRL's `grpo`) must not match TRL's `dapo`.
$bench check --config "$config" --set "model.path=\"$hf\"" --set rule='"seq"' --set "threads=$threads" \
    --batch "$check/batch.json" --out "$check/fulcrum_seq_grads.safetensors" >/dev/null
control=$($py bench/trl_grpo_real.py --compare "$check/trl_grads.safetensors" "$check/fulcrum_seq_grads.safetensors")
echo "grpo_real: control (fulcrum seq vs TRL dapo): $control" >&2

variants=" default ${VARIANTS:-bf16 all-responses llamacpp} "
wanted() { [[ $variants == *" $1 "* ]]; }
log=$out/rounds.jsonl
: >"$log"
# One fulcrum run: its metrics' per-step phases, the untimed steps left out.
fulcrum_run() { # ROUND VARIANT [--set K=V]...
    local round=$1 variant=$2 dir=$out/runs/$2
    shift 2
    rm -rf "$dir"
    $fulcrum train --config "$config" --quiet --run-dir "$dir" --set "model.path=\"$hf\"" \
        --set seed=0 --set "threads=$threads" --set "steps=$((warmup + steps))" \
        --set eval_every=0 --set eval.at_start=false --set eval.prompts=1 --set checkpoint_every=0 \
        --set export.hf=false --set logging.tensorboard=false "$@" >"$out/train-$variant.log" 2>&1 \
        || { tail -20 "$out/train-$variant.log" >&2; exit 1; }
    $py - "$dir/metrics.jsonl" "$warmup" "$round" "$variant" >>"$log" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
med = lambda k: statistics.median(r.get(k, 0.0) for r in rows)
print(json.dumps({"round": int(sys.argv[3]), "side": "fulcrum", "variant": sys.argv[4],
    "step_s": [r["time/step"] for r in rows], "median_s": med("time/step"),
    "median_sample_s": med("time/sample"), "median_score_s": med("time/score"),
    "median_old_logprobs_s": med("time/old_logprobs"), "median_train_s": med("time/train"),
    "median_push_s": med("time/weight_push"),
    "mean_completion_tokens": sum(r["sample/tokens"] for r in rows) / len(rows) / 64,
    "mean_reward": sum(r["reward/mean"] for r in rows) / len(rows),
    "mean_groups_mixed": sum(r["groups/mixed"] for r in rows) / len(rows)}))
PY
    rm -rf "$dir"
}
port=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null || true' EXIT
for ((r = 1; r <= rounds; r++)); do
    echo "grpo_real: round $r/$rounds (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    fulcrum_run "$r" default
    if wanted bf16; then fulcrum_run "$r" bf16 --set model.dtype='"bf16"'; fi
    if wanted all-responses; then
        fulcrum_run "$r" all-responses --set ppo.skip_zero_weight=false --set ppo.share_prompt=false
    fi
    if wanted llamacpp; then
        # A fresh server per round, holding the GGUF until the first step's push replaces it;
        # SLOTS slots (8: fed by the trainer's default 4 groups of 8 in flight; more: a group
        # in flight per 8 slots), each with room for a prompt and its response.
        slots=${SLOTS:-8}
        requests=$((slots / 8 > 4 ? slots / 8 : 4))
        ctx=$((slots > 8 ? 256 : 4096))
        scripts/llamacpp-server.sh "$gguf" "$port" --slots "$slots" --ctx "$ctx" --threads "$threads" >"$out/server.log" 2>&1 &
        server=$!
        until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
            kill -0 $server 2>/dev/null || { tail -20 "$out/server.log" >&2; exit 1; }
            sleep 0.5
        done
        fulcrum_run "$r" llamacpp --set rollout.engine='"llamacpp"' --set "rollout.engine_urls=[\"http://127.0.0.1:$port\"]" \
            --set "rollout.engine_requests=$requests"
        kill $server; wait $server 2>/dev/null || true; server=
    fi
    $py bench/trl_grpo_real.py --model "$hf" --prompts "$prompts" --threads "$threads" \
        --warmup "$warmup" --steps "$steps" 2>"$out/trl.log" | tail -1 \
        | $py -c "import json,sys; d=json.load(sys.stdin); d['round']=$r; print(json.dumps(d))" >>"$log" \
        || { tail -20 "$out/trl.log" >&2; exit 1; }
done
after=$(machine_json)
echo "grpo_real: $(machine_line after)" >&2
$py - "$log" "$before" "$after" "$replay" "$grads" "$threads" "$control" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
before, after, replay, grads = (json.loads(a) for a in sys.argv[2:6])
control = json.loads(sys.argv[7])
label = {"default": "fulcrum, defaults (f32, native sampler)", "bf16": "fulcrum, bf16",
         "all-responses": "fulcrum, every response trained (TRL's work)",
         "llamacpp": "fulcrum, sampling on llama.cpp"}
print(f"real-model GRPO step: SmolLM2-135M-Instruct, 8 prompts x 8, <= 64 new tokens, "
      f"{sys.argv[6]} threads; {before['cpu']}, {before['cores']} cores, load {before['load']} before, {after['load']} after")
print(f"arithmetic check (rule token vs TRL dapo, same batch): gradient cosine {grads['cosine']:.7f}, "
      f"largest relative difference {grads['max_rel_diff']:.2e} ({grads['worst']}); "
      f"prompts identical {replay['prompts_identical']}/{replay['rows']}, rewards identical {replay['rewards_identical']}/{replay['rows']}; "
      f"control, rule seq: cosine {control['cosine']:.4f}, largest relative difference {control['max_rel_diff']:.2e}")
by_round = {}
for x in rows:
    by_round.setdefault(x["round"], []).append(x)
ratios = {}
for r, xs in sorted(by_round.items()):
    trl = next(x for x in xs if x["side"] == "trl")["median_s"]
    for x in xs:
        name = "TRL GRPOTrainer (dapo)" if x["side"] == "trl" else label[x["variant"]]
        if x["side"] == "fulcrum":
            ratios.setdefault(x["variant"], []).append(trl / x["median_s"])
        print(f"  round {r}: {name:46s} {x['median_s']:6.2f} s/step  (sample {x['median_sample_s']:.2f}, "
              f"score {x['median_score_s']:.3f}, old log-probs {x['median_old_logprobs_s']:.2f}, "
              f"train {x['median_train_s']:.2f}, push {x['median_push_s']:.2f}; "
              f"{x['mean_completion_tokens']:.1f} tokens/response, reward {x['mean_reward']:.3f}, mixed groups {x['mean_groups_mixed']:.2f})"
              + (f"  -> {trl / x['median_s']:.2f}x TRL" if x["side"] == "fulcrum" else ""))
med = lambda side, v=None: statistics.median(
    x["median_s"] for x in rows if x["side"] == side and (v is None or x.get("variant") == v))
print("over all rounds (median of the per-round ratios):")
for v, rs in ratios.items():
    print(f"  {label[v]:46s} {statistics.median(rs):.2f}x TRL (rounds: {', '.join(f'{q:.2f}' for q in rs)})")
print(json.dumps({
    "fulcrum_s_per_step": med("fulcrum", "default"), "trl_s_per_step": med("trl"),
    "ratio": statistics.median(ratios["default"]),
    "ratios": {v: statistics.median(rs) for v, rs in ratios.items()},
    "s_per_step": {v: med("fulcrum", v) for v in ratios},
    "check": {"gradient_cosine": grads["cosine"], "max_rel_diff": grads["max_rel_diff"],
              "prompts_identical": replay["prompts_identical"], "rewards_identical": replay["rewards_identical"],
              "rows": replay["rows"], "control_seq_max_rel_diff": control["max_rel_diff"]},
    "threads": int(sys.argv[6]), "rounds": len(by_round), "machine": {"before": before, "after": after},
}))
PY
