//! A workspace as a checkpoint holds it: every path with what it is (file by content hash, link by target,
//! directory, or something not kept), its mode, and the stat fields that let the next checkpoint trust a file
//! unchanged without reading it.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A path relative to the workspace, as the bytes the kernel gave (names need not be UTF-8).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(pub Vec<u8>);

/// Marks a name that is not UTF-8 in its stored form: no name can hold a NUL.
const NOT_UTF8: &str = "\0b64:";

impl RelPath {
    /// The path for display: lossy where it is not UTF-8.
    pub fn display(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }

    /// The path as the OS takes it.
    pub fn as_path(&self) -> &std::path::Path {
        std::path::Path::new(std::ffi::OsStr::from_bytes(&self.0))
    }

    /// `self/name`.
    pub fn join(&self, name: &[u8]) -> RelPath {
        let mut p = self.0.clone();
        if !p.is_empty() {
            p.push(b'/');
        }
        p.extend_from_slice(name);
        RelPath(p)
    }

    /// The parent directory (empty for the root) and the last name.
    pub fn split(&self) -> (RelPath, &[u8]) {
        match self.0.iter().rposition(|b| *b == b'/') {
            Some(i) => (RelPath(self.0[..i].to_vec()), &self.0[i + 1..]),
            None => (RelPath(Vec::new()), &self.0[..]),
        }
    }
}

impl Serialize for RelPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.serialize_str(&format!(
                "{NOT_UTF8}{}",
                base64::engine::general_purpose::STANDARD.encode(&self.0)
            )),
        }
    }
}

impl<'de> Deserialize<'de> for RelPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.strip_prefix(NOT_UTF8) {
            Some(b64) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(RelPath)
                .map_err(serde::de::Error::custom),
            None => Ok(RelPath(text.into_bytes())),
        }
    }
}

/// The SHA-256 of a file's content: its name in the store, written in hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// The digest a name in hex spells, if it is one.
    pub fn from_hex(text: &str) -> Option<Digest> {
        let mut out = [0u8; 32];
        hex::decode_to_slice(text, &mut out).ok()?;
        Some(Digest(out))
    }
}

impl std::fmt::Display for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Bytes;
        impl serde::de::Visitor<'_> for Bytes {
            type Value = Digest;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("32 bytes of SHA-256")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Digest, E> {
                <[u8; 32]>::try_from(v)
                    .map(Digest)
                    .map_err(|_| E::invalid_length(v.len(), &self))
            }
        }
        d.deserialize_bytes(Bytes)
    }
}

/// What a path is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A regular file (hard links included: kept as their content), by the SHA-256 of its content.
    File {
        /// SHA-256 of the content.
        hash: Digest,
        /// Bytes.
        size: u64,
    },
    /// A symbolic link, kept as its target and never followed.
    Link {
        /// The target, as written.
        target: RelPath,
    },
    /// A directory.
    Dir,
    /// Something not kept (a socket, a fifo, a device, or unreadable): a restore leaves it alone.
    Other,
    /// A regular file not kept because its size would have taken the session past `checkpoint_max_mb`: a restore
    /// leaves it alone, and a rewind to a checkpoint that has one says so first.
    Skipped {
        /// Its size (`st_size`, holes included) when it was passed over.
        size: u64,
    },
    /// A path the project's ignore rules leave out (build output, dependencies): neither read nor entered, only its
    /// own stat kept, so that a change to it is reported as "changed, not checkpointed"; a restore leaves it alone.
    Ignored {
        /// Modification time, ns.
        mtime: i64,
        /// Status change time, ns.
        ctime: i64,
    },
}

/// The stat fields a file was hashed at: the same again means the same content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Modification time, ns.
    pub mtime: i64,
    /// Status change time, ns: no call sets it back, unlike mtime.
    pub ctime: i64,
    /// Inode.
    pub ino: u64,
    /// Device.
    pub dev: u64,
}

/// One path of a tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// What it is.
    pub kind: Kind,
    /// Permission bits.
    pub mode: u32,
    /// Owner and group, which a restore by root gives back.
    pub owner: (u32, u32),
    /// When set, the file's content is known from these fields alone; unset for a file changed too recently to
    /// tell a later change within the clock's tick.
    pub stamp: Option<Stamp>,
}

impl Entry {
    /// Same content and mode, whatever the stat fields.
    pub fn same(&self, other: &Entry) -> bool {
        self.kind == other.kind && self.mode == other.mode
    }
}

/// A workspace at one moment, by relative path in byte order (a directory comes before what it holds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tree(pub BTreeMap<RelPath, Entry>);

/// How a path differs between two trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Only in the later tree.
    Added,
    /// In both, with other content, target, kind or mode.
    Modified,
    /// Only in the earlier tree.
    Removed,
}

impl Tree {
    /// Files and links that differ from `before` to `self`, in path order. Directories are not listed: what they
    /// hold is.
    pub fn changes_since(&self, before: &Tree) -> Vec<(RelPath, Change)> {
        let kept = |e: &Entry| !matches!(e.kind, Kind::Dir | Kind::Other);
        let mut out = Vec::new();
        for (path, old) in before.0.iter().filter(|(_, e)| kept(e)) {
            match self.0.get(path) {
                None => out.push((path.clone(), Change::Removed)),
                Some(new) if !new.same(old) => out.push((path.clone(), Change::Modified)),
                Some(_) => {}
            }
        }
        for (path, _) in self.0.iter().filter(|(_, e)| kept(e)) {
            if !before.0.get(path).is_some_and(kept) {
                out.push((path.clone(), Change::Added));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Whether the tree holds `path` as a path the ignore rules left out.
    pub fn is_ignored(&self, path: &RelPath) -> bool {
        self.0
            .get(path)
            .is_some_and(|e| matches!(e.kind, Kind::Ignored { .. }))
    }

    /// Whether the tree holds `path` as a file whose content it keeps.
    pub fn is_file(&self, path: &RelPath) -> bool {
        self.0
            .get(path)
            .is_some_and(|e| matches!(e.kind, Kind::File { .. }))
    }

    /// Files kept in the tree.
    pub fn files(&self) -> usize {
        self.0
            .values()
            .filter(|e| matches!(e.kind, Kind::File { .. }))
            .count()
    }

    /// Files passed over for the bound, with their sizes.
    pub fn skipped(&self) -> impl Iterator<Item = (&RelPath, u64)> {
        self.0.iter().filter_map(|(p, e)| match e.kind {
            Kind::Skipped { size } => Some((p, size)),
            _ => None,
        })
    }

    /// Bytes of distinct content the tree refers to.
    pub fn content_bytes(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        self.0
            .values()
            .filter_map(|e| match &e.kind {
                Kind::File { hash, size } if seen.insert(hash) => Some(*size),
                _ => None,
            })
            .sum()
    }

    /// The content hashes the tree refers to.
    pub fn hashes(&self) -> impl Iterator<Item = &Digest> {
        self.0.values().filter_map(|e| match &e.kind {
            Kind::File { hash, .. } => Some(hash),
            _ => None,
        })
    }
}

/// A stored tree: whole, or the changes from another stored tree (most turns change a few files of many). Stored
/// as MessagePack with fields by position, so every field is always written.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Manifest {
    /// The checkpoint this one is the changes from; none for a whole tree.
    pub base: Option<u64>,
    /// Paths added or changed (all of them for a whole tree).
    pub set: BTreeMap<RelPath, Entry>,
    /// Paths gone.
    pub del: Vec<RelPath>,
}

impl Manifest {
    /// The stored form.
    pub fn to_bytes(&self) -> Vec<u8> {
        rmp_serde::to_vec(self).unwrap_or_default()
    }

    /// A manifest from its stored form.
    pub fn from_bytes(bytes: &[u8]) -> Result<Manifest, String> {
        rmp_serde::from_slice(bytes).map_err(|e| e.to_string())
    }
}

impl Manifest {
    /// `tree` as the changes from `base` (checkpoint `base_id`), including stat-only changes the next scan needs:
    /// one walk of both trees in path order.
    pub fn delta(tree: &Tree, base: &Tree, base_id: u64) -> Manifest {
        let (mut set, mut del) = (BTreeMap::new(), Vec::new());
        let (mut new, mut old) = (tree.0.iter().peekable(), base.0.iter().peekable());
        loop {
            match (new.peek(), old.peek()) {
                (None, None) => break,
                (Some((p, e)), Some((q, f))) if p == q => {
                    if e != f {
                        set.insert((*p).clone(), (*e).clone());
                    }
                    new.next();
                    old.next();
                }
                (Some((p, e)), Some((q, _))) if p < q => {
                    set.insert((*p).clone(), (*e).clone());
                    new.next();
                }
                (Some((p, e)), None) => {
                    set.insert((*p).clone(), (*e).clone());
                    new.next();
                }
                (_, Some((q, _))) => {
                    del.push((*q).clone());
                    old.next();
                }
            }
        }
        Manifest {
            base: Some(base_id),
            set,
            del,
        }
    }

    /// `tree` whole.
    pub fn whole(tree: &Tree) -> Manifest {
        Manifest {
            base: None,
            set: tree.0.clone(),
            del: Vec::new(),
        }
    }

    /// The tree this manifest makes from its base's tree.
    pub fn apply(self, mut base: Tree) -> Tree {
        for p in &self.del {
            base.0.remove(p);
        }
        base.0.extend(self.set);
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(n: u8) -> Entry {
        Entry {
            kind: Kind::File {
                hash: Digest([n; 32]),
                size: 1,
            },
            mode: 0o644,
            owner: (0, 0),
            stamp: None,
        }
    }

    #[test]
    fn a_name_that_is_not_utf8_survives_its_stored_form() {
        let p = RelPath(vec![b'a', 0xff, b'/', b'b']);
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<RelPath>(&text).unwrap(), p);
        let plain = RelPath(b"dir/file.txt".to_vec());
        assert_eq!(serde_json::to_string(&plain).unwrap(), "\"dir/file.txt\"");
    }

    #[test]
    fn a_delta_applied_to_its_base_gives_the_tree_back() {
        let mut base = Tree::default();
        base.0.insert(RelPath(b"a".to_vec()), file(1));
        base.0.insert(RelPath(b"b".to_vec()), file(2));
        let mut tree = base.clone();
        tree.0.remove(&RelPath(b"a".to_vec()));
        tree.0.insert(RelPath(b"c".to_vec()), file(3));
        let delta = Manifest::delta(&tree, &base, 7);
        assert_eq!(delta.set.len(), 1);
        assert_eq!(delta.del.len(), 1);
        assert_eq!(delta.apply(base.clone()), tree);
        let changes = tree.changes_since(&base);
        assert_eq!(
            changes,
            vec![
                (RelPath(b"a".to_vec()), Change::Removed),
                (RelPath(b"c".to_vec()), Change::Added)
            ]
        );
    }
}
