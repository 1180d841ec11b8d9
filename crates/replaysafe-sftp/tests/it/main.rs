//! Integration tests of replaysafe-sftp against a real OpenSSH sshd on 127.0.0.1
//! (`cargo xtask services sshd`): one binary, one module per area.

mod drops;
mod errors;
mod gate;
mod hostkeys;
mod interrupt;
mod password;
mod secrets;
mod support;
