//! Secrets: passwords that are wiped on drop and print as `***`.

use zeroize::Zeroizing;

/// A password or token. `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// Wraps a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Self(Zeroizing::new(value.into()))
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A BMC user and password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// User name.
    pub user: String,
    /// Password.
    pub password: Secret,
}

impl Credential {
    /// A credential.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self { user: user.into(), password: Secret::new(password) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let c = Credential::new("admin", "hunter2");
        assert!(!format!("{c:?}").contains("hunter2"));
        assert_eq!(c.password.expose(), "hunter2");
    }
}
