//! How big a stage log may grow, the way Docker's `max-size`/`max-file` say it: past
//! `max_size` bytes the log rotates, and `max_files` files are kept in all (the live one and
//! its rotated predecessors).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The daemon's default: 1 GiB per file, 3 files (3 GiB per stage at most).
pub const DEFAULT_MAX_SIZE: u64 = 1 << 30;
pub const DEFAULT_MAX_FILES: u32 = 3;
/// More rotated files than this is a mistake (and a slow rotation).
pub const MAX_FILES: u32 = 100;

/// The limits a stage log is written under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub max_size: u64,
    pub max_files: u32,
}

impl Default for Rotation {
    fn default() -> Rotation {
        Rotation { max_size: DEFAULT_MAX_SIZE, max_files: DEFAULT_MAX_FILES }
    }
}

/// A workflow stage's own limits; what it leaves out comes from the daemon's [`Rotation`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogLimits {
    pub max_size: Option<u64>,
    pub max_files: Option<u32>,
}

impl LogLimits {
    pub fn over(self, default: Rotation) -> Rotation {
        Rotation {
            max_size: self.max_size.unwrap_or(default.max_size),
            max_files: self.max_files.unwrap_or(default.max_files),
        }
    }
}

/// A number of bytes written `1GiB`, `512 MiB`, `100k`, `2G` (powers of 1024) or plainly
/// `1048576`; at least one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<ByteSize, String> {
        let text = s.trim();
        let shown = crate::text::one_line(text);
        let bad = || format!("'{shown}' is not a size (e.g. 1048576, 512KiB, 100MiB, 1GiB)");
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let number: u64 = number.parse().map_err(|_| bad())?;
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return Err(bad()),
        };
        let bytes = number.checked_mul(1 << shift).ok_or_else(|| format!("'{shown}' is too large"))?;
        if bytes == 0 {
            return Err(format!("'{shown}': a log size must be at least 1 byte"));
        }
        Ok(ByteSize(bytes))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
            if self.0 >= 1 << shift && self.0.is_multiple_of(1 << shift) {
                return write!(f, "{}{unit}", self.0 >> shift);
            }
        }
        write!(f, "{}", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ByteSize, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bytes(u64),
            Text(String),
        }
        match Written::deserialize(deserializer)? {
            Written::Bytes(0) => Err(serde::de::Error::custom("a log size must be at least 1 byte")),
            Written::Bytes(n) => Ok(ByteSize(n)),
            Written::Text(text) => text.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Refuses a file count outside 1..=[`MAX_FILES`].
pub fn check_max_files(count: u32) -> Result<u32, String> {
    if (1..=MAX_FILES).contains(&count) {
        Ok(count)
    } else {
        Err(format!("{count} is not a file count from 1 to {MAX_FILES}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_docker_writes_them() {
        for (text, bytes) in [
            ("1048576", 1 << 20),
            ("512KiB", 512 << 10),
            ("100 MiB", 100 << 20),
            ("1GiB", 1 << 30),
            ("2g", 2 << 30),
            ("10k", 10 << 10),
        ] {
            assert_eq!(text.parse::<ByteSize>(), Ok(ByteSize(bytes)), "{text}");
        }
        for text in ["", "0", "1.5GiB", "GiB", "12 parsecs", "-1", "99999999999T"] {
            assert!(text.parse::<ByteSize>().is_err(), "{text}");
        }
        assert_eq!(ByteSize(1 << 30).to_string(), "1GiB");
        assert_eq!(ByteSize(1000).to_string(), "1000");
        assert_eq!(serde_json::from_str::<ByteSize>("4096").unwrap(), ByteSize(4096));
        assert_eq!(serde_json::from_str::<ByteSize>("\"3MiB\"").unwrap(), ByteSize(3 << 20));
        assert!(check_max_files(0).is_err() && check_max_files(101).is_err() && check_max_files(3).is_ok());
        let stage = LogLimits { max_size: Some(10), max_files: None };
        assert_eq!(stage.over(Rotation::default()), Rotation { max_size: 10, max_files: DEFAULT_MAX_FILES });
    }
}
