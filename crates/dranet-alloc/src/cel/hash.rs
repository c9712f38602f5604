//! The word hash and comparison of attribute names: every attribute of every device is hashed
//! and compared on the allocator's cold path, where byte-at-a-time versions showed in profiles.

/// A multiplicative hash over 8-byte words of domain, its length, and name: every attribute
/// of every device is hashed on the cold path, where a byte-at-a-time hash showed in profiles.
/// Not keyed: a collision costs one string comparison, never a wrong answer.
pub(crate) fn key_hash(domain: &str, name: &str) -> u64 {
    let h = hash_words(0, domain.as_bytes());
    // The length separates ("ab", "c") from ("a", "bc").
    let h = mix(h, domain.len() as u64);
    hash_words(h, name.as_bytes())
}

/// One step of [`hash_words`].
#[inline]
fn mix(h: u64, word: u64) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    (h.rotate_left(5) ^ word).wrapping_mul(K)
}

/// `h` with the bytes of `b` mixed in 8 at a time (the last word zero-padded): the hash of
/// attribute names and of the CEL cache's expressions, both on the cold allocation path.
pub(crate) fn hash_words(mut h: u64, b: &[u8]) -> u64 {
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        h = mix(h, word_at(c, 0));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        h = mix(h, u64::from_le_bytes(w));
    }
    h
}

/// The 8 bytes of `s` from `at` as a little-endian word (`s` holds them: callers index within
/// its length).
#[inline]
fn word_at(s: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_le_bytes(w)
}

/// `a == b` for the short strings attribute names are, in 8-byte words (the last one
/// overlapping) rather than a call to `memcmp`, which was a third of a lookup.
#[inline]
pub(crate) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n < 8 {
        if n < 4 {
            return a.iter().zip(b).all(|(x, y)| x == y);
        }
        let half = |s: &[u8], at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&s[at..at + 4]);
            u32::from_le_bytes(w)
        };
        return half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4);
    }
    let mut at = 0;
    while at + 8 < n {
        if word_at(a, at) != word_at(b, at) {
            return false;
        }
        at += 8;
    }
    word_at(a, n - 8) == word_at(b, n - 8)
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    /// The word-wise comparison is `==` at every length and wherever two strings differ.
    #[test]
    fn same_bytes_is_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=base.len() {
            let a = &base[..n];
            assert!(same_bytes(a, a), "{n}");
            for m in 0..=base.len() {
                assert_eq!(same_bytes(a, &base[..m]), n == m, "{n} vs {m}");
            }
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!same_bytes(a, &b), "{n}: differs at {at}");
            }
        }
    }
}
