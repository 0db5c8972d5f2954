//! "Did you mean" suggestions for misspelled names.

/// The candidates closest to `name` by edit distance, at most `max(1, len / 3)` edits away,
/// best first, ties in alphabetical order (candidates often come from hash maps, and output
/// must not depend on their order). A case-only difference counts as one edit.
pub(crate) fn similar<'c>(name: &str, candidates: impl IntoIterator<Item = &'c str>) -> Vec<&'c str> {
    let limit = (name.chars().count() / 3).max(1);
    let mut scored: Vec<(usize, &str)> = candidates
        .into_iter()
        .filter(|c| *c != name)
        .filter_map(|c| {
            let d = if c.eq_ignore_ascii_case(name) { 1 } else { distance(name, c) };
            (d <= limit).then_some((d, c))
        })
        .collect();
    scored.sort();
    scored.dedup_by_key(|(_, c)| *c);
    scored.into_iter().map(|(_, c)| c).take(3).collect()
}

/// Optimal string alignment distance: insertions, deletions, substitutions and swaps of two
/// adjacent characters each cost one.
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > 3 {
        return usize::MAX;
    }
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1).min(rows[i][j - 1] + 1).min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

/// A help line naming the suggestions, if any.
pub(crate) fn help(suggestions: &[&str]) -> Option<String> {
    match suggestions {
        [] => None,
        [one] => Some(format!("a name that exists is similar: `{one}`")),
        many => Some(format!(
            "names that exist are similar: {}",
            many.iter().map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_suggested() {
        assert_eq!(similar("strng", ["string", "int", "bool"]), vec!["string"]);
        assert_eq!(similar("Hots", ["Host", "Hots2", "File"]), vec!["Host", "Hots2"]);
        assert_eq!(similar("nmae", ["name", "path"]), vec!["name"]);
        assert_eq!(similar("host", ["Host"]), vec!["Host"]);
        assert!(similar("x", ["completely", "different"]).is_empty());
    }
}
