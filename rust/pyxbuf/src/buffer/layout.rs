//! Layout questions shared by the iterators and the ndarray views.

/// Whether distinct indices reach disjoint items: with the axes sorted by
/// stride, each stride must step over everything the smaller ones span.
/// `dims` are `(extent, |stride|)` pairs and `item` the span of one item, in
/// one unit (bytes, or items with `item` 1). Sufficient, not necessary: some
/// interleaved layouts without overlaps are refused too, which is safe.
pub(super) fn non_overlapping(dims: impl Iterator<Item = (usize, usize)>, item: usize) -> bool {
    let mut axes: Vec<(usize, usize)> = Vec::new();
    for (n, stride) in dims {
        if n == 0 {
            return true; // no items: nothing to alias
        }
        if n > 1 {
            axes.push((stride, n));
        }
    }
    axes.sort_unstable();
    let mut span = item;
    for (stride, n) in axes {
        if stride < span {
            return false;
        }
        // What the axes so far reach: one more axis adds (n - 1) strides.
        span = match stride.checked_mul(n - 1).and_then(|v| v.checked_add(span)) {
            Some(v) => v,
            None => return false,
        };
    }
    true
}

#[cfg(test)]
mod tests {
    use super::non_overlapping;

    #[test]
    fn overlaps() {
        let ok = |axes: &[(usize, usize)], item| non_overlapping(axes.iter().copied(), item);
        assert!(ok(&[(3, 4)], 4) && ok(&[(2, 12), (3, 4)], 4) && ok(&[(3, 8)], 4));
        assert!(!ok(&[(3, 0)], 4), "a zero stride");
        assert!(!ok(&[(3, 2)], 4), "items wider than their stride");
        assert!(!ok(&[(2, 8), (3, 4)], 4), "rows that overlap");
        assert!(
            ok(&[(1, 0), (0, 0)], 4) && ok(&[(5, 0), (0, 4)], 4),
            "no items"
        );
        assert!(ok(&[(1, 0), (3, 4)], 4), "an extent of one never steps");
    }
}
