//! metal-erase: sanitize methods, read-back verification and signed wipe reports (arrive with the metal-erase issue).
