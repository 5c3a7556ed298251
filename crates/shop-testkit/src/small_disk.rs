//! A small file system of a test's own, to fill up: a tmpfs mounted on a temporary
//! directory, so a test can drive the shop's writes into "disk full" and back.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// A tmpfs of a few megabytes, unmounted when dropped. [`SmallDisk::fill`] takes
/// every free byte, [`SmallDisk::free`] gives them back.
pub struct SmallDisk {
    dir: TempDir,
    mount: PathBuf,
}

/// The file that holds the space [`SmallDisk::fill`] takes.
const FILLER: &str = "filler";

impl SmallDisk {
    /// Mounts a tmpfs of `megabytes` on a new temporary directory, or `None` (said
    /// loudly on stderr) where this machine does not let the test mount one (not
    /// root, or no `mount`). Under `CI=true` that is a failure.
    pub fn mount(megabytes: u32) -> Option<Self> {
        let dir = tempfile::Builder::new()
            .prefix("shop-disk-")
            .tempdir()
            .expect("create a temporary directory");
        let mount = dir.path().join("disk");
        std::fs::create_dir(&mount).expect("create the mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={megabytes}m"))
            .arg("tmpfs")
            .arg(&mount)
            .output();
        let why = match mounted {
            Ok(out) if out.status.success() => return Some(Self { dir, mount }),
            Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            Err(e) => e.to_string(),
        };
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and a tmpfs cannot be mounted for the disk-full drill: {why}");
        }
        // Straight to the process's stderr: the harness captures eprintln! of
        // passing tests, and a skip must not go unnoticed.
        let _ = std::io::stderr().write_all(
            format!(
                "\n*** SKIPPING a disk-full drill: cannot mount a tmpfs ({why}).\n\
                 *** Run the tests as root to include it. Under CI=true this is a failure.\n"
            )
            .as_bytes(),
        );
        None
    }

    /// The mounted directory: put the files under test here.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Writes a file until the file system is full. Returns the bytes it took.
    pub fn fill(&self) -> u64 {
        let mut file = std::fs::File::create(self.mount.join(FILLER)).expect("create the filler");
        let block = vec![0x5a_u8; 4096];
        let mut taken = 0u64;
        while file.write_all(&block).is_ok() {
            taken += block.len() as u64;
        }
        // The last partial block, byte by byte, so not even a page is left.
        while file.write_all(&block[..1]).is_ok() {
            taken += 1;
        }
        let _ = file.sync_all();
        taken
    }

    /// Gives back the space [`SmallDisk::fill`] took.
    pub fn free(&self) {
        let _ = std::fs::remove_file(self.mount.join(FILLER));
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // Lazily: a database connection still closing on another thread may hold a
        // file open for a moment; the mount goes when it lets go.
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        let _ = &self.dir;
    }
}
