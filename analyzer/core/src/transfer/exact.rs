//! Arithmetic as the reference's Python ints and floats do it, where i64 and f64 would
//! differ: int / int correctly rounded, float -> int truncated without overflow.

/// a / b of integers (b != 0), correctly rounded as Python's true division is. Both exact as
/// doubles, one IEEE division is that; otherwise (offsets past 2**53, no real capture's) the
/// quotient is taken in integers with enough bits to round once.
pub fn int_div(a: i64, b: i64) -> f64 {
    const EXACT: u64 = 1 << 53;
    let (x, y) = (a.unsigned_abs(), b.unsigned_abs());
    if y == 0 {
        return 0.0;
    }
    if x <= EXACT && y <= EXACT {
        return a as f64 / b as f64;
    }
    let negative = (a < 0) != (b < 0);
    let (x, y) = (u128::from(x), u128::from(y));
    let (lx, ly) = (128 - x.leading_zeros(), 128 - y.leading_zeros());
    // x << s has 56 more bits than y (at most 120 in all): a quotient of 55 bits or more,
    // whose last bit can carry the remainder as a sticky bit below the rounding position
    let s = (ly + 56).saturating_sub(lx);
    let n = x << s;
    let mut q = n / y;
    if n % y != 0 {
        q |= 1;
    }
    // q < 2**121: the conversion rounds once, the scaling by 2**-s is exact (no subnormals:
    // the quotient is at least 2**-64)
    let scale = f64::from_bits(u64::from(1023 - s) << 52);
    let r = q as f64 * scale;
    if negative {
        -r
    } else {
        r
    }
}

/// int(x) of a float: toward zero; saturated past i64 (a timestamp jump of 292,000 years,
/// where Python's int would keep growing), 0 for NaN.
pub fn trunc(x: f64) -> i64 {
    x as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_operands_divide_as_floats() {
        assert_eq!(int_div(1, 3), 1.0 / 3.0);
        assert_eq!(int_div(-7, 2), -3.5);
        assert_eq!(int_div(65160, 65535), 65160.0 / 65535.0);
        assert_eq!(int_div(5, 0), 0.0);
    }

    #[test]
    fn large_operands_round_once() {
        // 2**60 + 1 over 2**60: 1 + 2**-60 rounds to 1.0; (2**60 + 2**8) / 1 is exact
        assert_eq!(int_div((1 << 60) + 1, 1 << 60), 1.0);
        assert_eq!(int_div((1 << 60) + 256, 1), ((1u64 << 60) + 256) as f64);
        // the double nearest (2**53 + 1) / 1 is 2**53 (ties to even), and 2**53 + 3 goes up
        assert_eq!(int_div((1 << 53) + 1, 1), 9007199254740992.0);
        assert_eq!(int_div((1 << 53) + 3, 1), 9007199254740996.0);
        // (2**53 + 1) / 3: the naive float division rounds twice
        let exact = int_div((1 << 53) + 1, 3);
        assert_eq!(exact, 3002399751580331.0);
        assert_eq!(int_div(-((1 << 54) + 2), 2), -9007199254740992.0);
        assert_eq!(int_div(1152921504606847008, 3), 3.843071682022824e17);
        assert_eq!(int_div(i64::MIN, -1), 9223372036854775808.0);
        assert_eq!(int_div(1, i64::MAX), 1.0 / 9223372036854775807.0);
    }

    #[test]
    fn truncation_saturates() {
        assert_eq!(trunc(-0.5), 0);
        assert_eq!(trunc(199_999.9), 199_999);
        assert_eq!(trunc(-1e20), i64::MIN);
        assert_eq!(trunc(f64::NAN), 0);
    }
}
