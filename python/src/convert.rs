//! Python values to the slices fulcrum-core takes. Every problem is a `ValueError` that names the
//! argument and the index (`lengths[3]: expected an integer token count, got 12.5`), never a
//! panic.
//!
//! A sequence is a list, a tuple, any other iterable, or anything with `tolist()` (numpy arrays,
//! torch tensors), which is called first so that numpy scalars become plain Python numbers. Its
//! items may still be numpy scalars (`list(np.arange(4) // 2)`): an integer is anything with
//! `__index__` (Python's own test for "is an integer", which numpy's integer scalars pass), and a
//! bool is never a number of tokens or a group id, though Python counts `True` as an `int`.

use pyo3::exceptions::{PyOverflowError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString};

/// A group id as given: verl's `uid`s are strings, TRL's groups are block indices. `1` and `"1"`
/// are different groups, as in `fulcrum analyze`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GroupId {
    Int(i64),
    Str(String),
}

pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_string())
}

/// Python's `bool` or numpy's (`numpy.bool`, `numpy.bool_` before numpy 2), which is no `int`
/// subclass but converts to a float.
fn is_bool(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyBool>() || matches!(type_name(obj).as_str(), "bool" | "bool_")
}

/// `Some(n)` for an integer that is not a bool (a Python `int`, a numpy integer scalar), `None`
/// for anything else; `what` names the value in the out-of-range error.
fn integer(item: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<i64>> {
    if is_bool(item) || !(item.is_instance_of::<PyInt>() || item.hasattr("__index__")?) {
        return Ok(None);
    }
    match item.extract::<i64>() {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.is_instance_of::<PyOverflowError>(item.py()) => {
            Err(value_error(format!("{what} out of the i64 range")))
        }
        // An `__index__` that refuses (a float torch scalar): not an integer.
        Err(_) => Ok(None),
    }
}

/// The items of the sequence `obj`, passed as argument `arg`.
fn items<'py>(obj: &Bound<'py, PyAny>, arg: &str) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let obj = if obj.hasattr("tolist")? {
        obj.call_method0("tolist")?
    } else {
        obj.clone()
    };
    if obj.is_instance_of::<PyString>() {
        return Err(value_error(format!(
            "{arg}: expected a sequence (list or array), got a str"
        )));
    }
    let iter = obj.try_iter().map_err(|_| {
        value_error(format!(
            "{arg}: expected a sequence (list or array), got {}",
            type_name(&obj)
        ))
    })?;
    iter.collect()
}

/// Group ids: each an integer (Python or numpy, the same id for the same value) or a `str`.
pub fn group_ids(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<GroupId>> {
    items(obj, arg)?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if item.is_instance_of::<PyString>() {
                return Ok(GroupId::Str(item.extract::<String>()?));
            }
            match integer(item, &format!("{arg}[{i}]: integer group id"))? {
                Some(id) => Ok(GroupId::Int(id)),
                None => Err(value_error(format!(
                    "{arg}[{i}]: expected an int or str group id, got {}",
                    type_name(item)
                ))),
            }
        })
        .collect()
}

/// Numbers (rewards, advantages): anything Python can turn into a float. Finiteness is checked
/// by fulcrum-core, which names the argument and the index too.
pub fn floats(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<f64>> {
    items(obj, arg)?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if item.is_instance_of::<PyString>() {
                return Err(value_error(format!(
                    "{arg}[{i}]: expected a number, got a str"
                )));
            }
            item.extract::<f64>().map_err(|_| {
                value_error(format!(
                    "{arg}[{i}]: expected a number, got {}",
                    type_name(item)
                ))
            })
        })
        .collect()
}

/// Token counts: integers (Python or numpy), or floats with no fractional part (`mask.sum(-1)`
/// of a float mask; numpy's float scalars too). Negative counts are refused by fulcrum-core.
pub fn lengths(obj: &Bound<'_, PyAny>, arg: &str) -> PyResult<Vec<i64>> {
    items(obj, arg)?
        .iter()
        .enumerate()
        .map(|(i, item)| {
            if let Some(n) = integer(item, &format!("{arg}[{i}]: token count"))? {
                return Ok(n);
            }
            let float_like = item.is_instance_of::<PyFloat>()
                || (!is_bool(item)
                    && !item.is_instance_of::<PyString>()
                    && item.hasattr("__float__")?);
            if float_like {
                let x: f64 = item.extract()?;
                if x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e15 {
                    return Ok(x as i64);
                }
                return Err(value_error(format!(
                    "{arg}[{i}]: expected an integer token count, got {x}"
                )));
            }
            Err(value_error(format!(
                "{arg}[{i}]: expected an integer token count, got {}",
                type_name(item)
            )))
        })
        .collect()
}
