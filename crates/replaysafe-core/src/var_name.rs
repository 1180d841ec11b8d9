//! The name of an environment variable that holds a value, such as a secret.
//!
//! Configuration names secrets by the variable that holds them (`--secret-env VAR`, a
//! routes file's `secret_env`), so that the secret itself is never on a command line or in
//! a file. The usual mistake is to paste the secret where its variable's name belongs, and
//! the usual error, "environment variable whsec_… is not set", then prints the secret.
//! [`EnvVarName`] is the one place that rule lives: text that is not a variable name is
//! refused without being repeated, and the errors about a variable show only a checked
//! name.

use std::borrow::Cow;
use std::ffi::OsString;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;

/// The name of an environment variable: `[A-Za-z_][A-Za-z0-9_]*`.
///
/// Parsing refuses anything else as [`Error::NotAVariableName`], naming the field and never
/// repeating the text, which is most likely a secret pasted in the wrong place. Reading
/// the variable ([`EnvVarName::read`]) fails with [`Error::Variable`] when it is unset,
/// empty or not UTF-8; that message names the variable only when the name has no
/// lower-case letter (`PARTNER_SECRET`), since a secret that happens to be made of letters,
/// digits and `_` (`whsec_` and base64 often is) would otherwise pass as a name and be
/// printed back.
///
/// It deserializes from a JSON string with the same check (the error never quotes the
/// value) and serializes as the name.
///
/// ```
/// use replaysafe_core::EnvVarName;
///
/// let name = EnvVarName::parse("--secret-env", "PARTNER_SECRET")?;
/// assert_eq!(name.as_str(), "PARTNER_SECRET");
///
/// let pasted = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw+/A=";
/// let error = EnvVarName::parse("--secret-env", pasted).unwrap_err().to_string();
/// assert!(error.starts_with("--secret-env: not a variable name"), "{error}");
/// assert!(!error.contains("MfKQ9r8"));
/// # Ok::<(), replaysafe_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EnvVarName(String);

impl EnvVarName {
    /// What is wrong with text that is not a variable name, as every error about one says it
    /// (front ends that report errors their own way, such as a deserializer's, match on it).
    pub const NOT_A_NAME: &'static str = "not a variable name (letters, digits and _, \
        not starting with a digit): give the name of the environment variable that holds \
        the value, never the value itself";

    /// Checks that `text` is a variable name; `field` names where it was given (a flag, a
    /// configuration field) in the error, which never repeats `text`.
    pub fn parse(field: impl Into<Cow<'static, str>>, text: &str) -> Result<Self, Error> {
        if Self::is_valid(text) {
            Ok(EnvVarName(text.to_owned()))
        } else {
            Err(Error::NotAVariableName {
                field: field.into(),
            })
        }
    }

    /// Whether `text` is a variable name: `[A-Za-z_][A-Za-z0-9_]*`.
    pub fn is_valid(text: &str) -> bool {
        let mut bytes = text.bytes();
        bytes
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether error messages show the name: only when it has no lower-case letter, the
    /// shape of a variable name by convention and rarely of a secret.
    fn is_shown(&self) -> bool {
        !self.0.bytes().any(|b| b.is_ascii_lowercase())
    }

    /// The variable's value from the process environment. Unset, empty, all-blank or
    /// not UTF-8 is [`Error::Variable`], which never contains the value.
    pub fn read(&self) -> Result<String, Error> {
        self.value_of(std::env::var_os(&self.0))
    }

    fn value_of(&self, value: Option<OsString>) -> Result<String, Error> {
        let problem = |problem| Error::Variable {
            variable: self.clone(),
            problem,
        };
        let value = value.ok_or_else(|| problem("is not set"))?;
        let value = value
            .into_string()
            .map_err(|_| problem("is not valid UTF-8"))?;
        if value.trim().is_empty() {
            return Err(problem("is empty"));
        }
        Ok(value)
    }
}

/// A login given as configuration: a user and the variable holding its password, which
/// go together or not at all (the one place that rule is written, for every client
/// configuration that takes `user` and `password_env`).
///
/// Returns the user and the password read from the environment, or `None` when neither is
/// given. One without the other is [`Error::Missing`] naming the one that is missing; an
/// unset variable is [`Error::Variable`].
///
/// ```
/// use replaysafe_core::{EnvVarName, login};
/// assert!(login(None, None)?.is_none());
/// let error = login(Some("reports"), None).unwrap_err().to_string();
/// assert!(error.contains("password_env"), "{error}");
/// # Ok::<(), replaysafe_core::Error>(())
/// ```
pub fn login(
    user: Option<&str>,
    password_env: Option<&EnvVarName>,
) -> Result<Option<(String, String)>, Error> {
    const TOGETHER: &str = "user and password_env go together: give both, or neither";
    match (user, password_env) {
        (None, None) => Ok(None),
        (Some(user), Some(variable)) => {
            if user.trim().is_empty() {
                return Err(Error::Missing {
                    field: "user",
                    hint: TOGETHER,
                });
            }
            Ok(Some((user.to_owned(), variable.read()?)))
        }
        (Some(_), None) => Err(Error::Missing {
            field: "password_env",
            hint: TOGETHER,
        }),
        (None, Some(_)) => Err(Error::Missing {
            field: "user",
            hint: TOGETHER,
        }),
    }
}

/// The name when it is shown (see [`EnvVarName::read`]), otherwise a phrase saying why not.
impl fmt::Display for EnvVarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_shown() {
            f.write_str(&self.0)
        } else {
            f.write_str(
                "(its name has lower-case letters, so it is not shown in case it is a secret)",
            )
        }
    }
}

/// As [`Display`](fmt::Display).
impl fmt::Debug for EnvVarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EnvVarName({self})")
    }
}

impl Serialize for EnvVarName {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for EnvVarName {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = Cow::<'de, str>::deserialize(deserializer)?;
        if EnvVarName::is_valid(&text) {
            Ok(EnvVarName(text.into_owned()))
        } else {
            Err(serde::de::Error::custom(EnvVarName::NOT_A_NAME))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_letters_digits_and_underscores_not_starting_with_a_digit() {
        for good in ["A", "_", "PARTNER_SECRET", "smtp_password", "_X1", "a1_B2"] {
            assert!(EnvVarName::is_valid(good), "{good}");
        }
        for bad in [
            "",
            "1PASSWORD",
            "PARTNER-SECRET",
            " PARTNER_SECRET",
            "PARTNER_SECRET ",
            "https://hooks.slack.example/services/T0/B0/x",
            "whsec_c2VjcmV0+/==",
            "key=value",
            "ÉTÉ",
            "A\0B",
        ] {
            assert!(!EnvVarName::is_valid(bad), "{bad:?}");
        }
    }

    #[test]
    fn refusals_name_the_field_and_never_the_text() {
        let canary = "xoxb-canary-0c7e";
        let error = EnvVarName::parse("--token-env", canary).unwrap_err();
        let shown = error.to_string();
        assert!(
            shown.starts_with("--token-env: not a variable name"),
            "{shown}"
        );
        assert!(!shown.contains(canary) && !format!("{error:?}").contains(canary));
    }

    #[test]
    fn reading_says_what_is_wrong_and_shows_only_upper_case_names() {
        let name = EnvVarName::parse("f", "PARTNER_SECRET").unwrap();
        assert_eq!(
            name.value_of(None).unwrap_err().to_string(),
            "environment variable PARTNER_SECRET is not set"
        );
        assert_eq!(
            name.value_of(Some(" ".into())).unwrap_err().to_string(),
            "environment variable PARTNER_SECRET is empty"
        );
        assert_eq!(name.value_of(Some("s3cret".into())).unwrap(), "s3cret");
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStringExt;
            let bytes = OsString::from_vec(vec![0xff, 0xfe]);
            assert_eq!(
                name.value_of(Some(bytes)).unwrap_err().to_string(),
                "environment variable PARTNER_SECRET is not valid UTF-8"
            );
        }
        // A base64 secret of letters and digits only is a valid name: it is never shown.
        let secret_shaped = EnvVarName::parse("f", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2La").unwrap();
        let shown = secret_shaped.value_of(None).unwrap_err().to_string();
        assert!(!shown.contains("MfKQ9r8"), "{shown}");
        assert!(shown.ends_with("is not set"), "{shown}");
        assert!(!format!("{secret_shaped:?}").contains("MfKQ9r8"));
    }

    #[test]
    fn deserializing_checks_the_name_and_never_quotes_the_value() {
        let name: EnvVarName = serde_json::from_str("\"SMTP_PASSWORD\"").unwrap();
        assert_eq!(name.as_str(), "SMTP_PASSWORD");
        assert_eq!(serde_json::to_string(&name).unwrap(), "\"SMTP_PASSWORD\"");
        let error = serde_json::from_str::<EnvVarName>("\"hunter2!\"")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with(EnvVarName::NOT_A_NAME), "{error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
