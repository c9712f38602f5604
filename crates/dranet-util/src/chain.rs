//! An error and its sources as one line of text.

/// The error and all its sources as one line, `error: cause: cause`, leaving out a cause whose
/// text the line already holds (errors that print their source themselves).
///
/// ```
/// use dranet_util::{AtomicWriteError, AtomicWriteStep, error_chain};
/// let io = std::io::Error::other("no space left on device");
/// let e = AtomicWriteError::new(AtomicWriteStep::Write, "/run/x", io);
/// // The error prints its cause already: the cause is not repeated.
/// assert_eq!(error_chain(&e), "write /run/x: no space left on device");
/// ```
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = s.source();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[derive(Debug)]
    struct Wrap {
        text: &'static str,
        source: Option<Box<dyn std::error::Error + 'static>>,
    }

    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.text)
        }
    }

    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.source.as_deref()
        }
    }

    fn wrap(text: &'static str, source: Option<Wrap>) -> Wrap {
        Wrap {
            text,
            source: source.map(|s| Box::new(s) as Box<dyn std::error::Error>),
        }
    }

    #[test]
    fn every_cause_once_in_order() {
        let e = wrap(
            "prepare claim ns/c",
            Some(wrap("open netns", Some(wrap("no such device", None)))),
        );
        assert_eq!(
            error_chain(&e),
            "prepare claim ns/c: open netns: no such device"
        );
        // A cause the line already prints is not repeated.
        let e = wrap(
            "open netns: no such device",
            Some(wrap("no such device", None)),
        );
        assert_eq!(error_chain(&e), "open netns: no such device");
        assert_eq!(error_chain(&wrap("alone", None)), "alone");
    }
}
