//! Numbers as the report writes them, exactly as Python's `round` and `repr` would: the
//! report's times and ratios are rounded to fixed places, and its floats printed in their
//! shortest form, so a value means the same whichever language last touched it.

use std::fmt::Write;

/// Python's `round(x, places)`: the decimal of `places` places nearest to x's exact binary
/// value (ties to even), read back as a float. Most values are far from a tie, so x scaled
/// and rounded is the same decimal; near a tie the exact decimal formatting decides.
pub fn round_to(x: f64, places: i32) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(places);
    let scaled = x * scale;
    let fraction = (scaled - scaled.trunc()).abs();
    // the product is within a few ulps of the exact x * 10^places: a margin of 1e-6 of a unit
    // (far more than that error below 2^40) keeps a near-tie from being decided by it
    if scaled.abs() < (1u64 << 40) as f64 && (fraction - 0.5).abs() > 1e-6 {
        return scaled.round() / scale;
    }
    let mut text = String::with_capacity(32);
    let _ = write!(text, "{:.*}", places.max(0) as usize, x);
    text.parse().unwrap_or(x)
}

/// An integer's decimal digits (and sign), written into `buf`: what `int.__repr__` writes,
/// without core::fmt's machinery (a report has hundreds of thousands of counters).
pub fn int_text(n: i128, buf: &mut [u8; 40]) -> &str {
    let mut at = buf.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        if let Some(d) = buf.get_mut(at) {
            *d = b'0' + (rest % 10) as u8;
        }
        rest /= 10;
        if rest == 0 || at == 1 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        if let Some(d) = buf.get_mut(at) {
            *d = b'-';
        }
    }
    std::str::from_utf8(buf.get(at..).unwrap_or_default()).unwrap_or("0")
}

/// Python's `round(x)` of a float: the nearest integer, ties to even.
pub fn round_int(x: f64) -> i64 {
    x.round_ties_even() as i64
}

/// A finite float as Python's repr writes it: the shortest digits that read back as the same
/// float, ties between two such forms to even (as CPython's dtoa), placed as `float_repr_style` 'short' places
/// them: positional for exponents -4 to 15 with at least one digit after the point, else
/// d.ddde+XX with a signed exponent of at least two digits.
pub fn float_repr(f: f64, out: &mut String) {
    let mut sci = ScratchText::default();
    let _ = write!(sci, "{f:e}");
    // Where two shortest forms are equally near the float, Rust's rounds the tie up and
    // Python's to even: the correctly rounded form of as many digits is Python's whenever it
    // reads back as the same float. A tie needs the float's spacing to reach the last digit,
    // so only forms of 15 digits or more can meet one.
    let digit_count = sci.mantissa().bytes().filter(u8::is_ascii_digit).count();
    if digit_count >= 15 {
        let mut rounded = ScratchText::default();
        let _ = write!(rounded, "{:.*e}", digit_count - 1, f);
        if rounded.as_str().parse::<f64>() == Ok(f) {
            sci = rounded;
        }
    }
    let text = sci.as_str();
    let (mantissa, exp) = text.split_once('e').unwrap_or((text, "0"));
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let mut digits = ScratchText::default();
    for c in mantissa.chars().filter(|c| *c != '.') {
        let _ = digits.write_char(c);
    }
    let digits = digits.as_str();
    let exp: i32 = exp.parse().unwrap_or(0);
    let n = digits.len() as i32;
    let decpt = exp + 1; // the value is 0.<digits> x 10^decpt
    out.push_str(sign);
    if decpt <= -4 || decpt > 16 {
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..-decpt {
            out.push('0');
        }
        out.push_str(digits);
    } else if decpt >= n {
        out.push_str(digits);
        for _ in 0..decpt - n {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        let (whole, frac) = digits.split_at(decpt as usize);
        out.push_str(whole);
        out.push('.');
        out.push_str(frac);
    }
}

/// Text of a float's formatting on the stack: a float's `{:e}` form is at most 24 bytes
/// (17 digits, sign, point, exponent); anything longer is cut, never written past the end.
#[derive(Default)]
struct ScratchText {
    buf: [u8; 32],
    len: usize,
}

impl ScratchText {
    fn as_str(&self) -> &str {
        self.buf
            .get(..self.len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or("")
    }

    fn mantissa(&self) -> &str {
        let text = self.as_str();
        text.split('e').next().unwrap_or(text)
    }
}

impl Write for ScratchText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let room = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        room.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr(f: f64) -> String {
        let mut s = String::new();
        float_repr(f, &mut s);
        s
    }

    #[test]
    fn rounds_as_python() {
        // python3 -c "print(round(x, n))" for each
        for (x, n, want) in [
            (0.125, 2, 0.12),
            (0.375, 2, 0.38),
            (2.675, 2, 2.67),
            (1.0000005, 6, 1.000001),
            (0.0000125, 6, 1.3e-05),
            (123.4565, 6, 123.4565),
            (5e-7, 6, 0.0),
            (2.5e-6, 6, 3e-06),
            (-1e-9, 6, -0.0),
            (0.1 + 0.2, 3, 0.3),
            (1795366304.511671 - 1795366304.443, 6, 0.068671),
        ] {
            let got = round_to(x, n);
            assert_eq!(
                got.to_bits(),
                f64::to_bits(want),
                "round({x}, {n}) = {got}, not {want}"
            );
        }
        assert_eq!(round_int(2.5), 2);
        assert_eq!(round_int(3.5), 4);
        assert_eq!(round_int(-2.5), -2);
    }

    #[test]
    fn near_ties_agree_with_exact_formatting() {
        // every scaled value a half away from an integer, and its neighbours
        for k in 0..20_000i64 {
            for x in [(k as f64 + 0.5) / 1e6, (k as f64 + 0.5) / 1e3] {
                for y in [
                    x,
                    f64::from_bits(x.to_bits() + 1),
                    f64::from_bits(x.to_bits() - 1),
                ] {
                    for places in [3, 6] {
                        let exact: f64 = format!("{:.*}", places as usize, y).parse().unwrap();
                        assert_eq!(
                            round_to(y, places).to_bits(),
                            exact.to_bits(),
                            "{y} {places}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn ints_print_as_python_repr() {
        let mut buf = [0u8; 40];
        for n in [
            0i128,
            7,
            -7,
            10,
            123_456,
            i64::MAX.into(),
            i64::MIN.into(),
            -1,
            u64::MAX.into(),
        ] {
            assert_eq!(int_text(n, &mut buf), n.to_string());
        }
    }

    #[test]
    fn floats_print_as_python_repr() {
        for (f, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (7.5e-05, "7.5e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (1795366304.511671, "1795366304.511671"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e-7, "1e-07"),
            (123.456, "123.456"),
        ] {
            assert_eq!(repr(f), want);
        }
    }
}
