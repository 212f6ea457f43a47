//! `fulcrum_ba._core`: fulcrum-core's aggregation weights, advantages and `analyze` document for
//! Python, with no second implementation of the formulas (`shared/spec/aggregation.md`).
//!
//! The public API is the Python package `fulcrum_ba` (`fulcrum_ba/__init__.py`), which documents
//! each function; this module only converts arguments (`convert`), calls fulcrum-core and turns
//! every [`CoreError`] into a `ValueError` that names the argument. The extension links neither
//! libtorch nor libpython (abi3), so one wheel serves every CPython >= 3.10 and any torch.

mod convert;

use std::str::FromStr;

use fulcrum_core::advantages as core_advantages;
use fulcrum_core::{
    analysis, AnalysisReport, BaCount, CoreError, Diagnostics, Estimator, Rule, RuleParams,
    StepBatch,
};
use pyo3::prelude::*;

use convert::value_error;

fn core_error(e: CoreError) -> PyErr {
    value_error(e.to_string())
}

/// Parses a closed-set name; the error names the argument, then lists the valid names.
fn parse<T: FromStr<Err = CoreError>>(arg: &str, name: &str) -> PyResult<T> {
    name.parse()
        .map_err(|e: CoreError| value_error(format!("{arg}: {e}")))
}

/// `RuleParams` from the Python arguments; `l_norm=None` is the longest response, as in
/// `fulcrum analyze`.
fn rule_params(ba_count: &str, l_norm: Option<f64>, lengths: &[i64]) -> PyResult<RuleParams> {
    let params = RuleParams {
        ba_count: parse("ba_count", ba_count)?,
        l_norm: l_norm.unwrap_or_else(|| analysis::default_l_norm(lengths)),
        ..RuleParams::default()
    };
    params.validate().map_err(core_error)?;
    Ok(params)
}

/// One weight per response under `rule`, for the whole step batch.
#[pyfunction]
#[pyo3(signature = (group_ids, advantages, lengths, rule = "ba", ba_count = "group", l_norm = None))]
fn weights(
    group_ids: &Bound<'_, PyAny>,
    advantages: &Bound<'_, PyAny>,
    lengths: &Bound<'_, PyAny>,
    rule: &str,
    ba_count: &str,
    l_norm: Option<f64>,
) -> PyResult<Vec<f64>> {
    let rule: Rule = parse("rule", rule)?;
    let groups = convert::group_ids(group_ids, "group_ids")?;
    let adv = convert::floats(advantages, "advantages")?;
    let lengths = convert::lengths(lengths, "lengths")?;
    let params = rule_params(ba_count, l_norm, &lengths)?;
    let batch = StepBatch::new(&groups, &lengths, &adv).map_err(core_error)?;
    Ok(rule.weights(&batch, &params))
}

/// Group-relative advantages of the rewards; `lengths` are read by `opo` only.
#[pyfunction]
#[pyo3(signature = (group_ids, rewards, lengths = None, estimator = "grpo"))]
fn advantages(
    group_ids: &Bound<'_, PyAny>,
    rewards: &Bound<'_, PyAny>,
    lengths: Option<&Bound<'_, PyAny>>,
    estimator: &str,
) -> PyResult<Vec<f64>> {
    let estimator: Estimator = parse("estimator", estimator)?;
    let groups = convert::group_ids(group_ids, "group_ids")?;
    let rewards = convert::floats(rewards, "rewards")?;
    let lengths =
        match lengths {
            Some(l) => convert::lengths(l, "lengths")?,
            None if estimator == Estimator::Opo => return Err(value_error(
                "lengths: estimator opo weights the baseline by length, so lengths are required",
            )),
            None => vec![0; groups.len()],
        };
    core_advantages::compute(estimator, &groups, &rewards, &lengths).map_err(core_error)
}

/// The `fulcrum analyze --json` document of the batch, as JSON text.
#[pyfunction]
#[pyo3(signature = (group_ids, rewards, lengths, advantages = None, estimator = "grpo", ba_count = "group", l_norm = None))]
fn analyze_json(
    group_ids: &Bound<'_, PyAny>,
    rewards: &Bound<'_, PyAny>,
    lengths: &Bound<'_, PyAny>,
    advantages: Option<&Bound<'_, PyAny>>,
    estimator: &str,
    ba_count: &str,
    l_norm: Option<f64>,
) -> PyResult<String> {
    let estimator: Estimator = parse("estimator", estimator)?;
    let groups = convert::group_ids(group_ids, "group_ids")?;
    let rewards = convert::floats(rewards, "rewards")?;
    let lengths = convert::lengths(lengths, "lengths")?;
    let params = rule_params(ba_count, l_norm, &lengths)?;
    let adv = match advantages {
        Some(a) => convert::floats(a, "advantages")?,
        None => {
            core_advantages::compute(estimator, &groups, &rewards, &lengths).map_err(core_error)?
        }
    };
    let batch = StepBatch::new(&groups, &lengths, &adv).map_err(core_error)?;
    let diag = Diagnostics::compute(&batch, &rewards, &params).map_err(core_error)?;
    serde_json::to_string(&AnalysisReport::new(&adv, &diag))
        .map_err(|e| value_error(format!("analyze: {e}")))
}

/// Checks a name of one of the closed sets, `what` being the argument: `rule`, `ba_count` or
/// `estimator`. The error is the one `weights` and `advantages` raise for it.
#[pyfunction]
fn check_name(what: &str, name: &str) -> PyResult<()> {
    match what {
        "rule" => parse::<Rule>(what, name).map(|_| ()),
        "ba_count" => parse::<BaCount>(what, name).map(|_| ()),
        "estimator" => parse::<Estimator>(what, name).map(|_| ()),
        _ => Err(value_error(format!(
            "what: expected rule, ba_count or estimator, got {what:?}"
        ))),
    }
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(weights, m)?)?;
    m.add_function(wrap_pyfunction!(advantages, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_json, m)?)?;
    m.add_function(wrap_pyfunction!(check_name, m)?)?;
    let rules: Vec<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
    let estimators: Vec<&str> = Estimator::ALL.iter().map(|e| e.name()).collect();
    let ba_counts: Vec<&str> = BaCount::ALL.iter().map(|c| c.name()).collect();
    m.add("RULES", rules)?;
    m.add("ESTIMATORS", estimators)?;
    m.add("BA_COUNTS", ba_counts)?;
    m.add("DEFAULT_RULE", Rule::Ba.name())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
