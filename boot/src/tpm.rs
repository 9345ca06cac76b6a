//! The ramdisk's TPM 2.0 client: a handful of commands written to the kernel's resource
//! manager (`/dev/tpmrm0`) with password sessions of empty authorization, so the static
//! ramdisk needs no TSS library (none links statically with musl) and no crypto of its own.
//!
//! What it does: read the EK certificate the TPM's maker stored in NV, recreate the EK and
//! the attestation key (both primaries, derived from the endorsement seed, so the same keys
//! every boot with nothing kept on the machine), and quote PCRs with a caller's nonce.

use std::io::{Read, Write};

use metal_protocol::eventlog::HashAlgorithm;
use metal_protocol::tpm::{self, PublicKey, Reader, TpmError, Writer};

/// `TPM_ST_NO_SESSIONS`.
const ST_NO_SESSIONS: u16 = 0x8001;
/// `TPM_ST_SESSIONS`.
const ST_SESSIONS: u16 = 0x8002;
/// `TPM_RS_PW`: the password session.
const RS_PW: u32 = 0x4000_0009;
/// `TPM_RH_OWNER`.
const RH_OWNER: u32 = 0x4000_0001;
/// `TPM_RH_ENDORSEMENT`.
pub const RH_ENDORSEMENT: u32 = 0x4000_000b;
/// The NV index of an RSA 2048 EK certificate (TCG EK Credential Profile).
pub const EK_CERT_RSA_INDEX: u32 = 0x01c0_0002;

/// `TPM_RH_NULL`.
const RH_NULL: u32 = 0x4000_0007;
/// `TPM_SE_POLICY`.
const SE_POLICY: u8 = 0x01;

const CC_ACTIVATE_CREDENTIAL: u32 = 0x147;
const CC_CREATE_PRIMARY: u32 = 0x131;
const CC_POLICY_SECRET: u32 = 0x151;
const CC_START_AUTH_SESSION: u32 = 0x176;
const CC_NV_READ: u32 = 0x14e;
const CC_QUOTE: u32 = 0x158;
const CC_FLUSH_CONTEXT: u32 = 0x165;
const CC_NV_READ_PUBLIC: u32 = 0x169;
const CC_PCR_EXTEND: u32 = 0x182;
/// TPM_ALG_SHA256.
const ALG_SHA256: u16 = 0x000b;

/// `TPM_RC_RETRY`, `TPM_RC_YIELDED`, `TPM_RC_TESTING`: ask again.
const RC_TRY_AGAIN: [u32; 3] = [0x922, 0x908, 0x90a];
/// The most a response can be (`TPM_PT_MAX_RESPONSE_SIZE` is 4096 on every TPM seen).
const MAX_RESPONSE: usize = 4096;
/// The most NV bytes read per command (under every TPM's `TPM_PT_NV_BUFFER_MAX`).
const NV_CHUNK: u16 = 512;

/// Why a TPM command failed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The device could not be opened, written or read.
    #[error("the TPM device: {0}")]
    Io(#[from] std::io::Error),
    /// The TPM answered with an error code.
    #[error("{command}: the TPM answered {code:#x}{}", explain(*code))]
    Tpm {
        /// The command that failed.
        command: &'static str,
        /// The `TPM_RC`.
        code: u32,
    },
    /// The answer could not be read.
    #[error("{0}")]
    Malformed(#[from] TpmError),
}

/// What an error code means for an operator, for the codes a tenant's changes cause.
fn explain(code: u32) -> &'static str {
    const FORMAT_ONE: u32 = 0x80;
    match code {
        // Format-one codes carry the failing handle, session or parameter in bits 8 to 11.
        _ if code & FORMAT_ONE != 0 => match code & 0xbf {
            // TPM_RC_BAD_AUTH, TPM_RC_AUTH_FAIL
            0xa2 | 0x8e => {
                " (bad authorization: the hierarchy's password was changed; clear the TPM from the firmware)"
            }
            // TPM_RC_HANDLE
            0x8b => " (no such handle or NV index)",
            _ => "",
        },
        // TPM_RC_LOCKOUT
        0x921 => " (the TPM is in dictionary-attack lockout)",
        _ => "",
    }
}

/// A TPM behind a byte stream (`/dev/tpmrm0`, or a test's swtpm socket).
#[derive(Debug)]
pub struct Tpm<T> {
    device: T,
}

/// Where TPM commands go: the kernel's resource-managed device, or a Unix socket that takes
/// raw commands the same way (a bare swtpm: a simulated machine's TPM).
#[derive(Debug)]
pub enum Device {
    /// `/dev/tpmrm0`.
    File(std::fs::File),
    /// A raw-command socket.
    Socket(std::os::unix::net::UnixStream),
}

impl Read for Device {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Device::File(f) => f.read(buf),
            Device::Socket(s) => s.read(buf),
        }
    }
}

impl Write for Device {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Device::File(f) => f.write(buf),
            Device::Socket(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Device::File(f) => f.flush(),
            Device::Socket(s) => s.flush(),
        }
    }
}

impl Tpm<Device> {
    /// The TPM at `path`: the kernel's resource-managed device (`/dev/tpmrm0`), or a socket
    /// there that takes raw commands.
    pub fn open(path: &std::path::Path) -> Result<Self, CommandError> {
        use std::os::unix::fs::FileTypeExt as _;
        let explain = |e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("{}: {e} (no TPM 2.0, or its driver is not loaded)", path.display()))
        };
        let device = if std::fs::metadata(path).map_err(explain)?.file_type().is_socket() {
            Device::Socket(std::os::unix::net::UnixStream::connect(path).map_err(explain)?)
        } else {
            Device::File(std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(explain)?)
        };
        Ok(Tpm { device })
    }
}

/// A key the TPM holds for this session, and its public area.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Its transient handle (flushed by [`Tpm::flush`]).
    pub handle: u32,
    /// Its `TPMT_PUBLIC`.
    pub public: PublicKey,
}

impl<T: Read + Write> Tpm<T> {
    /// A TPM speaking on `device`.
    pub fn new(device: T) -> Self {
        Tpm { device }
    }

    /// Sends one command and returns the response after its header (handles and parameters,
    /// with sessions still in place).
    fn transact(&mut self, name: &'static str, command: &[u8]) -> Result<Vec<u8>, CommandError> {
        for _ in 0..50 {
            self.device.write_all(command)?;
            let response = self.response()?;
            let mut r = Reader::new(&response);
            let (_tag, _size, code) = (r.u16()?, r.u32()?, r.u32()?);
            if RC_TRY_AGAIN.contains(&code) {
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            if code != 0 {
                return Err(CommandError::Tpm { command: name, code });
            }
            return Ok(r.rest().to_vec());
        }
        Err(CommandError::Tpm { command: name, code: RC_TRY_AGAIN[0] })
    }

    /// One response: the kernel's device gives it in one read, a socket maybe in several.
    fn response(&mut self) -> Result<Vec<u8>, CommandError> {
        let mut response = Vec::new();
        let mut buffer = vec![0; MAX_RESPONSE];
        loop {
            let n = self.device.read(&mut buffer)?;
            if n == 0 {
                return Err(TpmError::Truncated(response.len()).into());
            }
            response.extend(&buffer[..n]);
            if response.len() >= 10 {
                let size = Reader::new(&response[2..6]).u32()?;
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if !(10..=MAX_RESPONSE).contains(&size) {
                    return Err(TpmError::Unsupported(format!("a response that says it is {size} bytes")).into());
                }
                if response.len() >= size {
                    response.truncate(size);
                    return Ok(response);
                }
            }
        }
    }

    /// A command with `handles`, a password session of empty authorization on each of
    /// `authorized` handles, and `parameters`.
    fn command(code: u32, handles: &[u32], authorized: usize, parameters: &[u8]) -> Vec<u8> {
        Self::command_in_sessions(code, handles, &vec![RS_PW; authorized], parameters)
    }

    /// A command with `handles` authorized by `sessions` in order (the password session, or
    /// a policy session that needs no HMAC), and `parameters`.
    fn command_in_sessions(code: u32, handles: &[u32], sessions: &[u32], parameters: &[u8]) -> Vec<u8> {
        let mut body = Writer::default();
        for handle in handles {
            body.u32(*handle);
        }
        if !sessions.is_empty() {
            // Each: the session handle, an empty nonce, no attributes, an empty HMAC.
            let area: Vec<u8> =
                sessions.iter().flat_map(|s| [&s.to_be_bytes()[..], &[0, 0, 0, 0, 0]].concat()).collect();
            body.u32(u32::try_from(area.len()).expect("small")).bytes(&area);
        }
        body.bytes(parameters);
        let mut command = Writer::default();
        command
            .u16(if sessions.is_empty() { ST_NO_SESSIONS } else { ST_SESSIONS })
            .u32(u32::try_from(10 + body.0.len()).expect("small"))
            .u32(code)
            .bytes(&body.0);
        command.0
    }

    /// The parameter area of a response to a command with sessions (after its handles).
    fn parameters(response: &[u8], handles: usize) -> Result<Vec<u8>, CommandError> {
        let mut r = Reader::new(response);
        r.take(4 * handles)?;
        let size = r.u32()?;
        Ok(r.take(usize::try_from(size).map_err(|_| TpmError::Truncated(0))?)?.to_vec())
    }

    /// Creates a primary key from `template` in `hierarchy` (the same key for the same
    /// template and seed, every time).
    pub fn create_primary(&mut self, hierarchy: u32, template: &[u8]) -> Result<Loaded, CommandError> {
        let mut p = Writer::default();
        p.sized(&[0, 0, 0, 0]); // inSensitive: empty userAuth, empty data
        p.sized(template);
        p.sized(&[]); // outsideInfo
        p.u32(0); // creationPCR: none
        let response = self.transact("CreatePrimary", &Self::command(CC_CREATE_PRIMARY, &[hierarchy], 1, &p.0))?;
        let handle = Reader::new(&response).u32()?;
        let parameters = Self::parameters(&response, 1)?;
        let public = PublicKey::parse(Reader::new(&parameters).sized()?)?;
        Ok(Loaded { handle, public })
    }

    /// Extends PCR `pcr`'s SHA-256 bank with `digest`, as firmware measures what it runs
    /// (the simulator's machines and the tests measure their own boots this way).
    pub fn pcr_extend(&mut self, pcr: u32, digest: &[u8; 32]) -> Result<(), CommandError> {
        let mut p = Writer::default();
        p.u32(1).u16(ALG_SHA256).bytes(digest);
        self.transact("PCR_Extend", &Self::command(CC_PCR_EXTEND, &[pcr], 1, &p.0)).map(drop)
    }

    /// Forgets a transient key.
    pub fn flush(&mut self, handle: u32) -> Result<(), CommandError> {
        self.transact("FlushContext", &Self::command(CC_FLUSH_CONTEXT, &[], 0, &handle.to_be_bytes())).map(drop)
    }

    /// The contents of an NV index, read with the index's own (empty) authorization, or the
    /// owner's when the index does not allow that.
    pub fn nv_read(&mut self, index: u32) -> Result<Vec<u8>, CommandError> {
        let response = self.transact("NV_ReadPublic", &Self::command(CC_NV_READ_PUBLIC, &[index], 0, &[]))?;
        let mut r = Reader::new(&response);
        let public = r.sized()?;
        let mut p = Reader::new(public);
        let (_index, _name_alg, attributes) = (p.u32()?, p.u16()?, p.u32()?);
        p.sized()?;
        let size = p.u16()?;
        const AUTHREAD: u32 = 1 << 18;
        let auth = if attributes & AUTHREAD != 0 { index } else { RH_OWNER };
        let mut data = Vec::with_capacity(usize::from(size));
        while data.len() < usize::from(size) {
            let offset = u16::try_from(data.len()).expect("under the index's u16 size");
            let chunk = NV_CHUNK.min(size - offset);
            let mut p = Writer::default();
            p.u16(chunk).u16(offset);
            let response = self.transact("NV_Read", &Self::command(CC_NV_READ, &[auth, index], 1, &p.0))?;
            let parameters = Self::parameters(&response, 0)?;
            data.extend(Reader::new(&parameters).sized()?);
        }
        Ok(data)
    }

    /// Recovers the secret a verifier encrypted with MakeCredential for `key` (loaded in this
    /// TPM) and the EK `ek`. The EK's policy asks for the endorsement hierarchy's (empty)
    /// authorization, given in a policy session that ends with the command.
    pub fn activate_credential(
        &mut self,
        key: u32,
        ek: u32,
        blob: &[u8],
        encrypted_seed: &[u8],
    ) -> Result<Vec<u8>, CommandError> {
        let mut p = Writer::default();
        p.sized(&[0; 16]); // nonceCaller (its content does not matter without HMACs)
        p.sized(&[]); // encryptedSalt: unsalted
        p.u8(SE_POLICY).u16(tpm::ALG_NULL).u16(HashAlgorithm::SHA256.0);
        let response =
            self.transact("StartAuthSession", &Self::command(CC_START_AUTH_SESSION, &[RH_NULL, RH_NULL], 0, &p.0))?;
        let session = Reader::new(&response).u32()?;
        let mut activate = || {
            let mut p = Writer::default();
            p.sized(&[]).sized(&[]).sized(&[]).u32(0); // nonceTPM, cpHashA, policyRef, expiration
            self.transact(
                "PolicySecret",
                &Self::command_in_sessions(CC_POLICY_SECRET, &[RH_ENDORSEMENT, session], &[RS_PW], &p.0),
            )?;
            let mut p = Writer::default();
            p.sized(blob).sized(encrypted_seed);
            let response = self.transact(
                "ActivateCredential",
                &Self::command_in_sessions(CC_ACTIVATE_CREDENTIAL, &[key, ek], &[RS_PW, session], &p.0),
            )?;
            let parameters = Self::parameters(&response, 0)?;
            Ok(Reader::new(&parameters).sized()?.to_vec())
        };
        let activated = activate();
        if activated.is_err() {
            // A failed command leaves the session loaded; a successful one ends it.
            let _ = self.flush(session);
        }
        activated
    }

    /// Quotes `pcrs` of the SHA-256 bank with `key`, binding `extra_data`: the `TPMS_ATTEST`
    /// bytes and their `TPMT_SIGNATURE`.
    pub fn quote(&mut self, key: u32, extra_data: &[u8], pcrs: &[u32]) -> Result<(Vec<u8>, Vec<u8>), CommandError> {
        let mut p = Writer::default();
        p.sized(extra_data);
        p.u16(tpm::ALG_NULL); // the key's own scheme
        p.bytes(&tpm::pcr_selection(HashAlgorithm::SHA256, pcrs));
        let response = self.transact("Quote", &Self::command(CC_QUOTE, &[key], 1, &p.0))?;
        let parameters = Self::parameters(&response, 0)?;
        let mut r = Reader::new(&parameters);
        let attest = r.sized()?.to_vec();
        Ok((attest, r.rest().to_vec()))
    }
}
