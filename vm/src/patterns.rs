//! How weft builds and runs a regex: typedef constraints (the machine) and the patterns of
//! plugins (the runtime) share one limit on backtracking and one reading of giving up.

/// How many backtracking steps a pattern may take to decide whether it matches, where it needs
/// backtracking at all (backreferences, lookaround). Python's `re` has no limit, and may take
/// minutes or years on such a pattern; weft stops after about a second of work and says it
/// could not decide, rather than answer either way.
pub const BACKTRACK_LIMIT: usize = 100_000_000;

/// A compiled pattern (already in the engine's syntax), with [`BACKTRACK_LIMIT`].
pub fn build(pattern: &str) -> Result<fancy_regex::Regex, fancy_regex::Error> {
    fancy_regex::RegexBuilder::new(pattern).backtrack_limit(BACKTRACK_LIMIT).build()
}

/// Whether `regex` matches `text`; `Err` says why it could not be decided (it gave up after
/// [`BACKTRACK_LIMIT`] steps), which must not read as "no match".
pub fn is_match(regex: &fancy_regex::Regex, text: &str) -> Result<bool, String> {
    regex.is_match(text).map_err(|e| {
        format!("{e}. weft gives up on a pattern after {BACKTRACK_LIMIT} backtracking steps, where Python's `re` would go on")
    })
}
