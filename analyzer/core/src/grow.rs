//! Lists the pass keeps until the capture ends (one entry per connection or per query): grown
//! by an eighth at a time, not doubled, so that at the end they hold at most an eighth more
//! room than entries rather than up to twice as much.

/// Push `item`, growing `list` by an eighth of its length (at least `MIN_GROWTH` entries)
/// when it is full.
pub fn push<T>(list: &mut Vec<T>, item: T) {
    if list.len() == list.capacity() {
        list.reserve_exact((list.len() / 8).max(MIN_GROWTH));
    }
    list.push(item);
}

const MIN_GROWTH: usize = 64;

#[cfg(test)]
mod tests {
    #[test]
    fn room_stays_within_an_eighth_of_the_entries() {
        let mut list = Vec::new();
        for i in 0..100_000u32 {
            super::push(&mut list, i);
            assert!(list.capacity() <= list.len() + list.len() / 8 + super::MIN_GROWTH);
        }
        assert!(list.iter().copied().eq(0..100_000u32));
    }
}
