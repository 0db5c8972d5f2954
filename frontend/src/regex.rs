//! Python regular expressions on a Rust engine.
//!
//! Typedef constraints such as `matching /^[a-z]+$/` are Python `re` patterns, applied with
//! `re.match` (anchored at the start only). Weft runs them on `fancy-regex`, whose syntax is
//! close to Python's but not equal, so patterns are translated first:
//!
//! * `$` outside a class means "at the end, or before a final newline" in Python; it becomes
//!   `(?=\n?\z)` unless the pattern turns on multi-line mode. A `$` that ends the pattern
//!   outside any group becomes `\n?\z` instead: nothing after it could tell the two apart,
//!   the patterns are only ever asked whether they match, and without a lookaround
//!   fancy-regex hands the whole pattern to the `regex` crate's automata instead of its
//!   backtracking machine (the common `/^[a-z]+$/` typedef then costs a tenth);
//! * `\Z` (Python's end of string) becomes `\z`;
//! * `(?P=name)` becomes `\k<name>`;
//! * in a character class, `[`, `&&` and `~~` are literal in Python but special in Rust, so
//!   they are escaped, and `\b` (a backspace in Python classes) becomes `\x08`;
//! * `{` that does not start a valid quantifier is a literal in Python and is escaped;
//!   `{,n}` becomes `{0,n}`;
//! * Python allows a quantifier after a lookaround (`a(?=b)?`), fancy-regex does not, so such
//!   a lookaround is wrapped in a non-capturing group padded with an empty match (`x{0}`).
//!
//! The translated pattern, wrapped by [`anchored_at_start`], gives `re.match` semantics.

/// Translates a Python pattern into fancy-regex syntax.
pub fn translate_python_regex(pattern: &str) -> String {
    let multiline = leading_flags(pattern).contains('m');
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut i = 0;
    let mut in_class = false;
    let mut class_start = 0;
    // Open groups: where each starts in `out`, and whether it is a lookaround.
    let mut groups: Vec<(usize, bool)> = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            let Some(&next) = chars.get(i + 1) else {
                out.push('\\');
                break;
            };
            match next {
                'Z' if !in_class => out.push_str("\\z"),
                'b' if in_class => out.push_str("\\x08"),
                _ => {
                    out.push('\\');
                    out.push(next);
                }
            }
            i += 2;
            continue;
        }
        if in_class {
            match c {
                ']' if i > class_start => {
                    in_class = false;
                    out.push(']');
                }
                '[' => out.push_str("\\["),
                '&' => out.push_str("\\&"),
                '~' => out.push_str("\\~"),
                _ => out.push(c),
            }
            i += 1;
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                out.push('[');
                i += 1;
                // A leading `^` negates; a `]` right after the opening (or after `^`) is a
                // literal member, as in Python.
                if chars.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                if chars.get(i) == Some(&']') {
                    out.push_str("\\]");
                    i += 1;
                }
                class_start = i;
                continue;
            }
            '$' if !multiline && i + 1 == chars.len() && groups.is_empty() => out.push_str("\\n?\\z"),
            '$' if !multiline => out.push_str("(?=\\n?\\z)"),
            '(' if !chars[i..].starts_with(&['(', '?', 'P', '=']) => {
                let lookaround = chars[i..].starts_with(&['(', '?', '='])
                    || chars[i..].starts_with(&['(', '?', '!'])
                    || chars[i..].starts_with(&['(', '?', '<', '='])
                    || chars[i..].starts_with(&['(', '?', '<', '!']);
                groups.push((out.len(), lookaround));
                out.push('(');
            }
            ')' => {
                out.push(')');
                if let Some((start, true)) = groups.pop()
                    && matches!(chars.get(i + 1), Some('?' | '*' | '+' | '{'))
                {
                    // fancy-regex also refuses to repeat a group holding only an assertion;
                    // `x{0}` matches the empty string and makes the group repeatable.
                    out.insert_str(start, "(?:");
                    out.push_str("x{0})");
                }
            }
            '(' if chars[i..].starts_with(&['(', '?', 'P', '=']) => {
                let close = chars[i..].iter().position(|&c| c == ')');
                match close {
                    Some(close) => {
                        let name: String = chars[i + 4..i + close].iter().collect();
                        out.push_str(&format!("\\k<{name}>"));
                        i += close + 1;
                        continue;
                    }
                    None => out.push('('),
                }
            }
            '{' => match quantifier_len(&chars[i..]) {
                Some((len, lower_missing)) => {
                    out.push('{');
                    if lower_missing {
                        out.push('0');
                    }
                    out.extend(&chars[i + 1..i + len]);
                    i += len;
                    continue;
                }
                None => out.push_str("\\{"),
            },
            '}' => out.push_str("\\}"),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

/// The inline flags of a leading `(?aiLmsux)` group, if any.
fn leading_flags(pattern: &str) -> &str {
    pattern
        .strip_prefix("(?")
        .and_then(|rest| {
            let end = rest.find(')')?;
            let flags = &rest[..end];
            flags.chars().all(|c| c.is_ascii_alphabetic()).then_some(flags)
        })
        .unwrap_or("")
}

/// If `chars` starts with a quantifier `{m}`, `{m,}`, `{,n}` or `{m,n}`, its length in
/// characters and whether the lower bound is missing.
fn quantifier_len(chars: &[char]) -> Option<(usize, bool)> {
    let mut i = 1;
    let digits = |i: &mut usize| {
        let s = *i;
        while chars.get(*i).is_some_and(char::is_ascii_digit) {
            *i += 1;
        }
        *i > s
    };
    let has_lower = digits(&mut i);
    let mut has_comma = false;
    if chars.get(i) == Some(&',') {
        has_comma = true;
        i += 1;
        digits(&mut i);
    }
    if chars.get(i) != Some(&'}') || (!has_lower && !has_comma) {
        return None;
    }
    Some((i + 1, !has_lower))
}

/// Wraps a translated pattern so that it only matches at the start, like `re.match`.
pub fn anchored_at_start(translated: &str) -> String {
    format!("\\A(?:{translated})")
}

/// Checks that a Python pattern compiles. The error text is the engine's, which differs from
/// Python's wording.
pub fn check_python_regex(pattern: &str) -> Result<(), String> {
    compiled(pattern).map(|_| ())
}

/// `re.match(pattern, text)`: whether the pattern matches at the start of `text`; an error
/// when the pattern does not compile.
pub fn python_match(pattern: &str, text: &str) -> Result<bool, String> {
    let re = compiled(pattern)?;
    Ok(re.is_match(text).unwrap_or(false))
}

/// The compiled, anchored form of a Python pattern. Modules repeat the same typedef patterns,
/// and compiling costs far more than parsing them, so results are cached for the thread; the
/// parser's validation and the checker's matching share the cache.
fn compiled(pattern: &str) -> Result<std::rc::Rc<fancy_regex::Regex>, String> {
    type Compiled = Result<std::rc::Rc<fancy_regex::Regex>, String>;
    thread_local! {
        static COMPILED: std::cell::RefCell<std::collections::HashMap<String, Compiled>> = Default::default();
    }
    if let Some(known) = COMPILED.with(|c| c.borrow().get(pattern).cloned()) {
        return known;
    }
    let result = compile(pattern).map(std::rc::Rc::new);
    COMPILED.with(|c| c.borrow_mut().insert(pattern.to_string(), result.clone()));
    result
}

fn compile(pattern: &str) -> Result<fancy_regex::Regex, String> {
    // Compile the pattern on its own first: inside the anchoring group, a stray `)` would
    // close the wrapper and hide an unbalanced parenthesis.
    let translated = translate_python_regex(pattern);
    fancy_regex::Regex::new(&translated).map_err(|e| e.to_string())?;
    fancy_regex::Regex::new(&anchored_at_start(&translated)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        python_match(pattern, text).unwrap()
    }

    #[test]
    fn python_semantics_survive_translation() {
        // re.match anchors at the start only.
        assert!(matches("[a-z]+", "abc123"));
        assert!(!matches("[a-z]+", "1abc"));
        // `$` also matches before a final newline.
        assert!(matches("^a$", "a\n"));
        assert!(!matches("^a$", "a\n\n"));
        assert!(!matches("^a$", "ab"));
        assert!(matches("a$|b", "b"));
        assert!(matches("(a$)", "a\n"));
        assert!(!matches("(a$)", "a\nb"));
        assert!(!matches("^a\\Z", "a\n"));
        // A final `$` needs no lookaround, which keeps the pattern on the fast engine.
        assert_eq!(translate_python_regex("^[a-z]+$"), "^[a-z]+\\n?\\z");
        assert_eq!(translate_python_regex("(a$)"), "(a(?=\\n?\\z))");
        // Literal `[` in a class, `{` that is not a quantifier, `{,n}`.
        assert!(matches("[[]", "["));
        assert!(matches("a{b", "a{b"));
        assert!(matches("^a{,2}$", "aa"));
        assert!(matches("(?P<x>a)(?P=x)", "aa"));
        assert!(matches("^[]a]+$", "]a"));
        // A quantified lookaround.
        assert!(matches("a(?=b)?", "ac"));
        assert!(check_python_regex("(?!b)*x").is_ok());
        assert!(matches("^([0-9a-fA-F]{2})(:[0-9a-fA-F]{2}){5}$", "00:11:22:33:44:55"));
    }

    #[test]
    fn invalid_patterns_are_rejected() {
        assert!(check_python_regex("[a-z").is_err());
        assert!(check_python_regex("(").is_err());
        assert!(check_python_regex("([0-9]{2))(:[0-9]{2}").is_err());
        assert!(check_python_regex("^(.*\\S.*)$").is_ok());
    }
}
