//! Splitting a command line into words as Python's `shlex.split` does (POSIX mode, no
//! comments), which is how the reference's exec handler turns `command` into an argv.

/// Why a command line cannot be split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(super) enum SplitError {
    #[error("No closing quotation")]
    UnclosedQuote,
    #[error("No escaped character")]
    TrailingBackslash,
}

/// Splits `line` into words: whitespace separates words; a backslash outside quotes takes the
/// next character literally; single quotes take everything literally; inside double quotes a
/// backslash escapes only `"` and `\`. Quotes join with adjacent text (`a"b c"` is one word)
/// and an empty pair of quotes is an empty word.
pub(super) fn split(line: &str) -> Result<Vec<String>, SplitError> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Whether a word has started: `''` starts an empty word that must still be emitted.
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\\' => {
                word.push(chars.next().ok_or(SplitError::TrailingBackslash)?);
                in_word = true;
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next().ok_or(SplitError::UnclosedQuote)? {
                        '\'' => break,
                        other => word.push(other),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next().ok_or(SplitError::UnclosedQuote)? {
                        '"' => break,
                        '\\' => match chars.next().ok_or(SplitError::UnclosedQuote)? {
                            escaped @ ('"' | '\\') => word.push(escaped),
                            other => {
                                word.push('\\');
                                word.push(other);
                            }
                        },
                        other => word.push(other),
                    }
                }
            }
            other => {
                word.push(other);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_python_shlex() {
        // Expected values are what Python 3.12's shlex.split returns.
        let cases: &[(&str, Result<&[&str], SplitError>)] = &[
            ("echo hello  world", Ok(&["echo", "hello", "world"])),
            ("sh -c 'echo $HOME; exit 3'", Ok(&["sh", "-c", "echo $HOME; exit 3"])),
            (r#"printf "a \"b\" \$c \\ d""#, Ok(&["printf", r#"a "b" \$c \ d"#])),
            (r"a\ b c\\d", Ok(&["a b", r"c\d"])),
            ("x '' \"\" y", Ok(&["x", "", "", "y"])),
            ("pre'fix 'mid\"dle\"", Ok(&["prefix middle"])),
            ("  \t\n ", Ok(&[])),
            ("echo # not a comment", Ok(&["echo", "#", "not", "a", "comment"])),
            ("echo 'open", Err(SplitError::UnclosedQuote)),
            ("echo \"open", Err(SplitError::UnclosedQuote)),
            ("echo trailing\\", Err(SplitError::TrailingBackslash)),
        ];
        for (line, expected) in cases {
            let expected = expected.map(|words| words.iter().map(|w| w.to_string()).collect::<Vec<_>>());
            assert_eq!(split(line), expected, "{line}");
        }
    }
}
