//! The testbed's named choices (guest kernel, lower tier): one spelling on
//! command lines, in the tests' environment variables and in tables.

/// The kind in `all` whose `name` is `s` (surrounding blanks ignored).
///
/// Errors: an unknown name; the message says `what` was asked for and lists
/// the known names.
pub(crate) fn parse<T: Copy>(
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
    s: &str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|&k| name(k) == s.trim())
        .ok_or_else(|| {
            let known: Vec<&str> = all.iter().map(|&k| name(k)).collect();
            format!("unknown {what} {s:?} (known: {})", known.join(", "))
        })
}

/// The kind environment variable `var` names (parsed as [`parse`] does),
/// else `T::default()` when it is unset or empty.
///
/// Errors: the variable holds an unknown name (the message names `var`).
pub(crate) fn from_env<T: Copy + Default>(
    var: &str,
    all: &[T],
    name: fn(T) -> &'static str,
    what: &str,
) -> Result<T, String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => parse(all, name, what, &v).map_err(|e| format!("{var}: {e}")),
        _ => Ok(T::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_with_blanks_and_unknown_ones_list_the_known() {
        let name = |k: u8| if k == 1 { "one" } else { "two" };
        assert_eq!(parse(&[1u8, 2], name, "number", " two\n"), Ok(2));
        assert_eq!(
            parse(&[1u8, 2], name, "number", "three"),
            Err("unknown number \"three\" (known: one, two)".to_string())
        );
    }
}
