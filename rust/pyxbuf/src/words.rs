//! Words in messages: one helper so that every count agrees with its noun.

/// `n` and the noun in the number `n` asks for: "1 view", "2 views",
/// "0 bytes".
pub(crate) fn count(n: impl Into<u128>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::count;

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1u32, "view", "views"), "1 view");
        assert_eq!(count(0u32, "view", "views"), "0 views");
        assert_eq!(count(2usize as u64, "byte", "bytes"), "2 bytes");
    }
}
