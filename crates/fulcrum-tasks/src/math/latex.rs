//! The LaTeX parser of answer comparison: a normalised answer to an [`Expr`] tree.
//!
//! A recursive-descent parser over bytes: sums, products (implicit too: `2\sqrt{3}`, `(a+5)(b+2)`),
//! powers, `\frac`, `\sqrt[n]`, the functions of [`FUNCS`], Greek letters as variables,
//! factorials. Anything it does not model fails to parse. Nesting deeper than [`MAX_DEPTH`] and
//! inputs longer than [`MAX_LEN`] are refused, so adversarial input cannot recurse deeply.

use super::expr::{Expr, MAX_DEPTH, MAX_LEN};

pub(crate) const FUNCS: [&str; 14] = [
    "sin", "cos", "tan", "cot", "sec", "csc", "arcsin", "arccos", "arctan", "ln", "log", "exp",
    "abs", "sqrt",
];

const GREEK: [&str; 24] = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "varepsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
    "nu",
    "xi",
    "rho",
    "sigma",
    "tau",
    "phi",
    "varphi",
    "chi",
    "psi",
    "omega",
    "hbar",
];

/// Parses a normalised answer; `None` when it is not a plain expression.
pub fn parse(s: &str) -> Option<Expr> {
    if s.is_empty() || s.len() > MAX_LEN {
        return None;
    }
    let mut p = Parser {
        s: s.as_bytes(),
        i: 0,
        depth: 0,
    };
    let e = p.sum()?;
    (p.peek().is_none()).then_some(e)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&mut self) -> Option<u8> {
        while self.s.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, t: &str) -> bool {
        self.peek();
        if self.s[self.i..].starts_with(t.as_bytes()) {
            self.i += t.len();
            true
        } else {
            false
        }
    }

    /// A command name after `\` (letters only), without consuming it.
    fn command(&self) -> Option<&str> {
        if self.s.get(self.i) != Some(&b'\\') {
            return None;
        }
        let start = self.i + 1;
        let mut end = start;
        while self.s.get(end).is_some_and(u8::is_ascii_alphabetic) {
            end += 1;
        }
        std::str::from_utf8(&self.s[start..end]).ok()
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    fn sum(&mut self) -> Option<Expr> {
        self.enter()?;
        let mut acc = match self.peek() {
            Some(b'-') => {
                self.i += 1;
                Expr::Neg(Box::new(self.product()?))
            }
            Some(b'+') => {
                self.i += 1;
                self.product()?
            }
            _ => self.product()?,
        };
        loop {
            if self.eat("+") {
                acc = Expr::Add(Box::new(acc), Box::new(self.product()?));
            } else if self.eat("-") {
                acc = Expr::Sub(Box::new(acc), Box::new(self.product()?));
            } else if self.eat("\\pm") {
                return None;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Some(acc)
    }

    fn product(&mut self) -> Option<Expr> {
        self.peek();
        let start = self.i;
        let mut acc = self.power()?;
        // A mixed number: an integer literal followed by a fraction of integer literals
        // (`1\frac{4}{5}` is 9/5, as MATH answers write it).
        if self.s[start..self.i].iter().all(u8::is_ascii_digit) {
            if let Some(frac) = self.integer_fraction() {
                acc = Expr::Add(Box::new(acc), Box::new(frac));
            }
        }
        loop {
            if self.eat("*") || self.eat("\\times") || self.eat("\\cdot") {
                acc = Expr::Mul(Box::new(acc), Box::new(self.power()?));
            } else if self.eat("/") || self.eat("\\div") {
                acc = Expr::Div(Box::new(acc), Box::new(self.power()?));
            } else if self.starts_atom() {
                // Implicit multiplication: `2\pi`, `3x`, `(a+5)(b+2)`.
                acc = Expr::Mul(Box::new(acc), Box::new(self.power()?));
            } else {
                break;
            }
        }
        Some(acc)
    }

    /// `\frac{a}{b}` with digit-only `a` and `b`, consumed only if it matches.
    fn integer_fraction(&mut self) -> Option<Expr> {
        let rest = &self.s[self.i..];
        let body = rest.strip_prefix(b"\\frac{")?;
        let a = body.iter().take_while(|c| c.is_ascii_digit()).count();
        let body2 = body[a..].strip_prefix(b"}{")?;
        let b = body2.iter().take_while(|c| c.is_ascii_digit()).count();
        if a == 0 || b == 0 || a > 30 || b > 30 || body2.get(b) != Some(&b'}') {
            return None;
        }
        let num: i128 = std::str::from_utf8(&body[..a]).ok()?.parse().ok()?;
        let den: i128 = std::str::from_utf8(&body2[..b]).ok()?.parse().ok()?;
        self.i += 6 + a + 2 + b + 1;
        Some(Expr::Rat(num, den))
    }

    fn starts_atom(&mut self) -> bool {
        match self.peek() {
            Some(c) if c.is_ascii_alphanumeric() || c == b'(' || c == b'{' || c == b'[' => true,
            Some(b'\\') => self
                .command()
                .is_some_and(|c| !matches!(c, "times" | "cdot" | "div" | "pm" | "cup" | "cap")),
            _ => false,
        }
    }

    fn power(&mut self) -> Option<Expr> {
        let mut base = self.postfix()?;
        if self.eat("^") {
            let exp = if self.peek() == Some(b'-') {
                self.i += 1;
                Expr::Neg(Box::new(self.postfix()?))
            } else {
                self.postfix()?
            };
            base = Expr::Pow(Box::new(base), Box::new(exp));
        }
        Some(base)
    }

    fn postfix(&mut self) -> Option<Expr> {
        let mut a = self.atom()?;
        while self.eat("!") {
            a = Expr::Fact(Box::new(a));
        }
        Some(a)
    }

    /// A `{...}` group (required for `\frac`, `\sqrt` and friends); a single char also counts.
    fn group(&mut self) -> Option<Expr> {
        if self.eat("{") {
            let e = self.sum()?;
            self.eat("}").then_some(e)
        } else {
            self.atom()
        }
    }

    fn atom(&mut self) -> Option<Expr> {
        self.enter()?;
        let c = self.peek()?;
        let e = match c {
            b'0'..=b'9' | b'.' => self.number()?,
            b'(' | b'[' | b'{' => {
                self.i += 1;
                let e = self.sum()?;
                let close = match c {
                    b'(' => ")",
                    b'[' => "]",
                    _ => "}",
                };
                if !self.eat(close) {
                    return None;
                }
                e
            }
            b'|' => {
                self.i += 1;
                let e = self.sum()?;
                if !self.eat("|") {
                    return None;
                }
                Expr::Func("abs", Box::new(e))
            }
            b'a'..=b'z' | b'A'..=b'Z' => {
                self.i += 1;
                let mut name = (c as char).to_string();
                self.subscript_and_primes(&mut name)?;
                if name == "e" {
                    Expr::Const(std::f64::consts::E)
                } else {
                    Expr::Var(name)
                }
            }
            b'\\' => {
                let cmd = self.command()?.to_string();
                self.i += 1 + cmd.len();
                match cmd.as_str() {
                    "frac" | "cfrac" => {
                        let a = self.group()?;
                        let b = self.group()?;
                        Expr::Div(Box::new(a), Box::new(b))
                    }
                    "sqrt" => {
                        if self.eat("[") {
                            let n = self.sum()?;
                            if !self.eat("]") {
                                return None;
                            }
                            Expr::Root(Box::new(n), Box::new(self.group()?))
                        } else {
                            Expr::Func("sqrt", Box::new(self.group()?))
                        }
                    }
                    "pi" => Expr::Const(std::f64::consts::PI),
                    "infty" => Expr::Const(f64::INFINITY),
                    "binom" => {
                        let n = self.group()?;
                        let k = self.group()?;
                        let fact = |x: Expr| Expr::Fact(Box::new(x));
                        let diff = Expr::Sub(Box::new(n.clone()), Box::new(k.clone()));
                        Expr::Div(
                            Box::new(fact(n)),
                            Box::new(Expr::Mul(Box::new(fact(k)), Box::new(fact(diff)))),
                        )
                    }
                    f if FUNCS.contains(&f) => {
                        let name = FUNCS.iter().find(|x| **x == f).copied()?;
                        let arg = if self.eat("^") {
                            // \sin^2 x
                            let p = self.postfix()?;
                            let a = self.power()?;
                            return Some(Expr::Pow(
                                Box::new(Expr::Func(name, Box::new(a))),
                                Box::new(p),
                            ));
                        } else {
                            self.power()?
                        };
                        Expr::Func(name, Box::new(arg))
                    }
                    g if GREEK.contains(&g) => {
                        let mut name = format!("\\{g}");
                        self.subscript_and_primes(&mut name)?;
                        Expr::Var(name)
                    }
                    _ => return None,
                }
            }
            _ => return None,
        };
        self.depth -= 1;
        Some(e)
    }

    /// Appends `_0`, `_{12}` and primes to a variable name.
    fn subscript_and_primes(&mut self, name: &mut String) -> Option<()> {
        if self.eat("_") {
            let start = self.i;
            if self.eat("{") {
                let close = self.s[self.i..].iter().position(|&b| b == b'}')?;
                self.i += close + 1;
            } else {
                self.i += 1;
            }
            name.push('_');
            name.push_str(std::str::from_utf8(self.s.get(start..self.i)?).ok()?);
        }
        while self.eat("'") || self.eat("^{\\prime}") || self.eat("^\\prime") {
            name.push('\'');
        }
        Some(())
    }

    fn number(&mut self) -> Option<Expr> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.i += 1;
            }
        }
        let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
        if text == "." {
            return None;
        }
        // Scientific notation `4.4e7`, `3e-10` (an `e` followed by a digit or sign-digit).
        let mut exp: i32 = 0;
        if self.peek() == Some(b'e') {
            let mut j = self.i + 1;
            if matches!(self.s.get(j), Some(b'-' | b'+')) {
                j += 1;
            }
            if self.s.get(j).is_some_and(u8::is_ascii_digit) {
                let es = self.i + 1;
                let mut k = j;
                while self.s.get(k).is_some_and(u8::is_ascii_digit) {
                    k += 1;
                }
                exp = std::str::from_utf8(&self.s[es..k]).ok()?.parse().ok()?;
                self.i = k;
            }
        }
        let digits: String = text.chars().filter(|c| c.is_ascii_digit()).collect();
        let frac_digits = match text.split_once('.') {
            Some((_, f)) => f.len() as u32,
            None => 0,
        };
        let value = if digits.len() <= 30 && frac_digits <= 30 && exp.abs() <= 30 {
            let n: i128 = digits.parse().ok()?;
            let scale = frac_digits as i32 - exp;
            if scale >= 0 {
                Expr::Rat(n, 10i128.pow(scale as u32))
            } else {
                Expr::Rat(n.checked_mul(10i128.checked_pow((-scale) as u32)?)?, 1)
            }
        } else {
            let x: f64 = text.parse().ok()?;
            Expr::Float(x * 10f64.powi(exp))
        };
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::expr::{eval, Val};

    fn value(s: &str) -> Option<Val> {
        eval(&parse(s)?, &|_| 0.5)
    }

    #[test]
    fn exact_values_stay_rational() {
        assert_eq!(value("-\\frac{24}{25}"), Some(Val::Rat(-24, 25)));
        assert_eq!(value("0.25"), Some(Val::Rat(1, 4)));
        assert_eq!(value("4.4e7"), Some(Val::Rat(44_000_000, 1)));
        assert_eq!(value("3.2\\times10^{-5}"), Some(Val::Rat(1, 31250)));
        assert_eq!(value("\\sqrt{\\frac{9}{4}}"), Some(Val::Rat(3, 2)));
        assert_eq!(value("\\binom{5}{2}"), Some(Val::Rat(10, 1)));
        assert_eq!(value("2^{10}"), Some(Val::Rat(1024, 1)));
        assert_eq!(value("1\\frac{4}{5}"), Some(Val::Rat(9, 5)));
        assert_eq!(value("-2\\frac{1}{2}"), Some(Val::Rat(-5, 2)));
        assert_eq!(
            value("2\\frac{\\pi}{2}").map(Val::f),
            Some(std::f64::consts::PI)
        );
    }

    #[test]
    fn irrational_values_are_numeric() -> Result<(), String> {
        let v = value("2\\sqrt{113}").ok_or("no value")?;
        assert!((v.f() - 2.0 * 113f64.sqrt()).abs() < 1e-12);
        let v = value("7\\pi").ok_or("no value")?;
        assert!((v.f() - 7.0 * std::f64::consts::PI).abs() < 1e-12);
        Ok(())
    }

    #[test]
    fn implicit_products_and_variables_parse() {
        assert!(parse("(a+5)(b+2)").is_some());
        assert!(parse("5r^5").is_some());
        assert!(parse("\\frac{n(n+1)}{2}").is_some());
        assert!(parse("E_{0}^{2}\\omega").is_some());
        assert!(parse("\\unknowncommand{3}").is_none());
        assert!(parse("(1").is_none());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let s = format!("{}1{}", "(".repeat(500), ")".repeat(500));
        assert!(parse(&s).is_none());
    }
}
