//! The expression trees of answer comparison and their evaluation; `latex.rs` parses them.
//!
//! Normalised answers such as `2\sqrt{113}`, `-\frac{24}{25}`, `7\pi`, `5r^5`,
//! `\frac{n(n+1)}{2}`, `4.4e7`, `3.2\times10^{-5}` become a tree, evaluated: exactly as a
//! rational (`i128` over `i128`) while it can, numerically (`f64`) otherwise (irrational
//! constants, roots that are not perfect, overflow). Letters and Greek commands are variables;
//! comparisons with variables evaluate both sides at fixed sample points. Anything unknown
//! (a command we do not model, unbalanced braces) fails to parse, and the caller falls back to
//! comparing normalised strings. Nesting deeper than [`MAX_DEPTH`] and inputs longer than
//! [`MAX_LEN`] are refused, so adversarial input cannot recurse deeply or take long.

/// Deepest nesting of groups the parser accepts.
pub const MAX_DEPTH: usize = 48;
/// Longest input (bytes) the parser accepts.
pub const MAX_LEN: usize = 2000;

/// An expression tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// An exact rational number.
    Rat(i128, i128),
    /// An inexact number (too long to be exact).
    Float(f64),
    /// A variable (`x`, `\omega`, `E_0`).
    Var(String),
    /// π, e, ∞.
    Const(f64),
    /// Sum.
    Add(Box<Expr>, Box<Expr>),
    /// Difference.
    Sub(Box<Expr>, Box<Expr>),
    /// Product.
    Mul(Box<Expr>, Box<Expr>),
    /// Quotient.
    Div(Box<Expr>, Box<Expr>),
    /// Power.
    Pow(Box<Expr>, Box<Expr>),
    /// Negation.
    Neg(Box<Expr>),
    /// A function of one argument (`sqrt`, `sin`, `ln`, ...), or an n-th root.
    Func(&'static str, Box<Expr>),
    /// n-th root.
    Root(Box<Expr>, Box<Expr>),
    /// Factorial.
    Fact(Box<Expr>),
}

/// A value: exact while possible.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Val {
    /// Exact rational, denominator positive and reduced.
    Rat(i128, i128),
    /// Inexact.
    F(f64),
}

impl Val {
    /// As a float.
    pub fn f(self) -> f64 {
        match self {
            Val::Rat(n, d) => n as f64 / d as f64,
            Val::F(x) => x,
        }
    }
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

fn rat(n: i128, d: i128) -> Option<Val> {
    if d == 0 {
        return None;
    }
    let g = gcd(n, d).max(1);
    let s = if d < 0 { -1 } else { 1 };
    Some(Val::Rat(s * n / g, s * d / g))
}

fn float(x: f64) -> Option<Val> {
    x.is_finite().then_some(Val::F(x))
}

fn add(a: Val, b: Val) -> Option<Val> {
    if let (Val::Rat(p, q), Val::Rat(r, s)) = (a, b) {
        let exact = (|| {
            rat(
                p.checked_mul(s)?.checked_add(r.checked_mul(q)?)?,
                q.checked_mul(s)?,
            )
        })();
        if exact.is_some() {
            return exact;
        }
    }
    float(a.f() + b.f())
}

fn mul(a: Val, b: Val) -> Option<Val> {
    if let (Val::Rat(p, q), Val::Rat(r, s)) = (a, b) {
        let exact = (|| rat(p.checked_mul(r)?, q.checked_mul(s)?))();
        if exact.is_some() {
            return exact;
        }
    }
    float(a.f() * b.f())
}

fn neg(a: Val) -> Val {
    match a {
        Val::Rat(n, d) => Val::Rat(-n, d),
        Val::F(x) => Val::F(-x),
    }
}

fn recip(a: Val) -> Option<Val> {
    match a {
        Val::Rat(n, d) => rat(d, n),
        Val::F(x) => float(1.0 / x),
    }
}

/// Exact integer square root of a non-negative i128, if it is a perfect square.
fn exact_sqrt(n: i128) -> Option<i128> {
    if n < 0 {
        return None;
    }
    let r = (n as f64).sqrt().round() as i128;
    (r.checked_mul(r)? == n).then_some(r)
}

fn pow(a: Val, b: Val) -> Option<Val> {
    if let (Val::Rat(p, q), Val::Rat(e, 1)) = (a, b) {
        if e.abs() <= 256 {
            let mut num: Option<i128> = Some(1);
            let mut den: Option<i128> = Some(1);
            for _ in 0..e.abs() {
                num = num.and_then(|x| x.checked_mul(p));
                den = den.and_then(|x| x.checked_mul(q));
            }
            if let (Some(n), Some(d)) = (num, den) {
                return if e >= 0 { rat(n, d) } else { rat(d, n) };
            }
        }
    }
    if let (Val::Rat(p, q), Val::Rat(1, 2)) = (a, b) {
        if let (Some(x), Some(y)) = (exact_sqrt(p), exact_sqrt(q)) {
            return rat(x, y);
        }
    }
    float(a.f().powf(b.f()))
}

/// Evaluates an expression with variables bound by `var`.
pub fn eval(e: &Expr, var: &dyn Fn(&str) -> f64) -> Option<Val> {
    Some(match e {
        Expr::Rat(n, d) => rat(*n, *d)?,
        Expr::Float(x) => float(*x)?,
        Expr::Var(v) => float(var(v))?,
        Expr::Const(c) => Val::F(*c),
        Expr::Add(a, b) => add(eval(a, var)?, eval(b, var)?)?,
        Expr::Sub(a, b) => add(eval(a, var)?, neg(eval(b, var)?))?,
        Expr::Mul(a, b) => mul(eval(a, var)?, eval(b, var)?)?,
        Expr::Div(a, b) => mul(eval(a, var)?, recip(eval(b, var)?)?)?,
        Expr::Pow(a, b) => pow(eval(a, var)?, eval(b, var)?)?,
        Expr::Neg(a) => neg(eval(a, var)?),
        Expr::Root(n, a) => pow(eval(a, var)?, recip(eval(n, var)?)?)?,
        Expr::Fact(a) => match eval(a, var)? {
            Val::Rat(n, 1) if (0..=30).contains(&n) => {
                Val::Rat((1..=n).product::<i128>().max(1), 1)
            }
            _ => return None,
        },
        Expr::Func(f, a) => {
            let x = eval(a, var)?;
            if *f == "sqrt" {
                return pow(x, Val::Rat(1, 2));
            }
            let x = x.f();
            float(match *f {
                "sin" => x.sin(),
                "cos" => x.cos(),
                "tan" => x.tan(),
                "cot" => 1.0 / x.tan(),
                "sec" => 1.0 / x.cos(),
                "csc" => 1.0 / x.sin(),
                "arcsin" => x.asin(),
                "arccos" => x.acos(),
                "arctan" => x.atan(),
                "ln" | "log" => x.ln(),
                "exp" => x.exp(),
                "abs" => x.abs(),
                _ => return None,
            })?
        }
    })
}

/// Collects the variable names of an expression.
pub fn variables(e: &Expr, out: &mut Vec<String>) {
    match e {
        Expr::Var(v) => {
            if !out.contains(v) {
                out.push(v.clone());
            }
        }
        Expr::Add(a, b) | Expr::Sub(a, b) | Expr::Mul(a, b) | Expr::Div(a, b) | Expr::Pow(a, b) => {
            variables(a, out);
            variables(b, out);
        }
        Expr::Root(a, b) => {
            variables(a, out);
            variables(b, out);
        }
        Expr::Neg(a) | Expr::Func(_, a) | Expr::Fact(a) => variables(a, out),
        Expr::Rat(..) | Expr::Float(_) | Expr::Const(_) => {}
    }
}
