//! "Did you mean …?": a word given where a bundle was likely meant, close to one that exists (clap does the same
//! for commands).

/// The name `word` is probably a typo of: within one edit of a name of up to five characters, two of a longer one,
/// and not the name itself.
pub(super) fn near(word: &str, names: impl IntoIterator<Item = String>) -> Option<String> {
    if word.contains(char::is_whitespace) || word.is_empty() {
        return None;
    }
    let allowed = if word.chars().count() <= 5 { 1 } else { 2 };
    names
        .into_iter()
        .filter(|n| n != word)
        .map(|n| (strsim::damerau_levenshtein(word, &n), n))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n)
}

/// The ids of the bundles in `home`'s store, the built-in ones included.
pub(super) fn bundles(home: &service_supervisor::ServiceHome) -> Vec<String> {
    service_supervisor::bundle::store::list_installed(home)
        .unwrap_or_default()
        .into_iter()
        .map(|i| i.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::near;

    fn names() -> Vec<String> {
        ["hello", "run", "coder", "sessions", "help"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn a_word_one_or_two_edits_from_a_name_is_a_probable_typo() {
        assert_eq!(near("helo", names()), Some("hello".into()));
        assert_eq!(near("rnu", names()), Some("run".into()));
        assert_eq!(near("sesions", names()), Some("sessions".into()));
        assert_eq!(near("helps", names()), Some("help".into()));
        assert_eq!(near("hallo", names()), Some("hello".into()));
    }

    #[test]
    fn a_name_itself_a_distant_word_or_a_sentence_is_not() {
        assert_eq!(near("hello", names()), None);
        assert_eq!(near("xyz", names()), None);
        assert_eq!(near("explain", names()), None);
        assert_eq!(near("fix it", names()), None);
        assert_eq!(near("ab", names()), None);
    }
}
