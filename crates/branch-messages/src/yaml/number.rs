//! Python's `repr` of a float, which both the YAML rendering and the
//! reference's JSON-ish texts use.

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation
/// for decimal exponents in `-4..16`, scientific (`1e-05`, `1.5e+16`)
/// otherwise; integral values keep `.0`.
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // `{:e}` gives the shortest round-trip digits with the decimal exponent.
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let (head, tail) = digits.split_at(1);
        let frac = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{head}{frac}e{esign}{:02}", exp.abs());
    }
    if exp < 0 {
        let zeros = "0".repeat((-exp - 1) as usize);
        return format!("{sign}0.{zeros}{digits}");
    }
    let point = exp as usize + 1;
    if digits.len() <= point {
        let zeros = "0".repeat(point - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int, frac) = digits.split_at(point);
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::python_float_repr as r;

    #[test]
    fn matches_python_repr() {
        assert_eq!(r(0.9), "0.9");
        assert_eq!(r(42.0), "42.0");
        assert_eq!(r(0.0001), "0.0001");
        assert_eq!(r(0.00001), "1e-05");
        assert_eq!(r(1.5e-7), "1.5e-07");
        assert_eq!(r(1e16), "1e+16");
        assert_eq!(r(1234567890123456.0), "1234567890123456.0");
        assert_eq!(r(-0.0), "-0.0");
        assert_eq!(r(123.456), "123.456");
        assert_eq!(r(1.0 / 3.0), "0.3333333333333333");
        assert_eq!(r(2.5e300), "2.5e+300");
    }
}
