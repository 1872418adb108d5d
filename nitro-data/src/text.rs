//! Character-level text corpora for language models: reading a file or a
//! folder of UTF-8 text ([`read_corpus`]), the fixed 96-symbol character
//! vocabulary ([`CharVocab`]), the unigram entropy a model must beat
//! ([`unigram_entropy_bits`]), and deterministic train / validation / test
//! windows as `ids` / `next` fields ([`char_lm_splits`]).
//!
//! Does not own tokenisers beyond characters, nor batching (the windows are
//! an [`InMemory`] dataset like any other).
//!
//! **Split.** The encoded corpus is cut into blocks of
//! [`CharLmConfig::block`] characters; a hash of the block's index (not of
//! its content, so the split does not move when a file is edited elsewhere)
//! sends 1 block in `val_every` to validation and another 1 in `val_every`
//! to test, the rest to training. A window never crosses a block, so no
//! validation character is ever a training input or label.

use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::loaders::LoadError;
use crate::{DataError, Fields, HostArray, InMemory, Splits};

/// The character vocabulary: `'\n'` is id 0, the printable ASCII `' '`
/// ..= `'}'` are ids 1 ..= 94, and every other character (`'~'`, tabs,
/// non-ASCII) is [`CharVocab::UNKNOWN`], 96 symbols in all. `'~'` shares
/// the unknown slot because it is the rarest printable character in code
/// (11 in this repository's 1.8 M), which keeps the vocabulary at the 96 of
/// the GPT benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CharVocab;

impl CharVocab {
    /// Symbols in the vocabulary.
    pub const SIZE: usize = 96;
    /// The id every character outside the vocabulary maps to.
    pub const UNKNOWN: i32 = 95;
    /// How [`CharVocab::decode`] writes the unknown symbol.
    pub const UNKNOWN_CHAR: char = '\u{FFFD}';

    /// The id of `c`.
    pub fn id(c: char) -> i32 {
        match c {
            '\n' => 0,
            ' '..='}' => c as i32 - ' ' as i32 + 1,
            _ => Self::UNKNOWN,
        }
    }

    /// The character of `id` (the replacement character for the unknown
    /// symbol or an id outside the vocabulary).
    pub fn char(id: i32) -> char {
        match id {
            0 => '\n',
            1..=94 => char::from(b' ' + (id - 1) as u8),
            _ => Self::UNKNOWN_CHAR,
        }
    }

    /// Ids of every character of `text`.
    pub fn encode(text: &str) -> Vec<i32> {
        text.chars().map(Self::id).collect()
    }

    /// The text of `ids`.
    pub fn decode(ids: &[i32]) -> String {
        ids.iter().map(|&i| Self::char(i)).collect()
    }
}

fn io(path: &Path, e: std::io::Error) -> LoadError {
    LoadError::Io {
        file: path.display().to_string(),
        message: e.to_string(),
    }
}

/// Whether a folder walk skips `name`: build outputs (`target`), run
/// directories (`runs`) and hidden entries (`.git`, ...).
fn skipped(name: &str) -> bool {
    name == "target" || name == "runs" || name.starts_with('.')
}

/// The files a folder contributes: `*.rs` and `*.md` below it, skipping
/// `target`, `runs` and hidden entries, sorted by path so the corpus is the same on every
/// machine.
pub fn corpus_files(dir: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(|e| io(&d, e))? {
            let entry = entry.map_err(|e| io(&d, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if skipped(&name) {
                continue;
            }
            let path = entry.path();
            let kind = entry.file_type().map_err(|e| io(&path, e))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() && (name.ends_with(".rs") || name.ends_with(".md")) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The text of `path`: a UTF-8 file as it is, or a folder's
/// [`corpus_files`] concatenated in path order, each followed by a newline.
/// A file that is not UTF-8, or a folder without such files, is an error
/// naming it.
pub fn read_corpus(path: &Path) -> Result<String, LoadError> {
    let read = |p: &Path| -> Result<String, LoadError> {
        let bytes = std::fs::read(p).map_err(|e| io(p, e))?;
        String::from_utf8(bytes).map_err(|e| LoadError::Unsupported {
            file: p.display().to_string(),
            message: format!(
                "not UTF-8 text (invalid byte at {}); give a UTF-8 file or a folder of them",
                e.utf8_error().valid_up_to()
            ),
        })
    };
    if !path.is_dir() {
        return read(path);
    }
    let files = corpus_files(path)?;
    if files.is_empty() {
        return Err(LoadError::Unsupported {
            file: path.display().to_string(),
            message: "the folder holds no *.rs or *.md files (outside target/, runs/ and hidden folders); give a UTF-8 file or another folder".into(),
        });
    }
    let mut text = String::new();
    for f in files {
        text.push_str(&read(&f)?);
        text.push('\n');
    }
    Ok(text)
}

/// The entropy in bits per character of the id frequencies of `ids`: what a
/// model that ignores context reaches at best (0 for empty input).
pub fn unigram_entropy_bits(ids: &[i32]) -> f64 {
    let mut counts = [0u64; CharVocab::SIZE];
    for &i in ids {
        counts[(i.clamp(0, CharVocab::SIZE as i32 - 1)) as usize] += 1;
    }
    let n = ids.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// How [`char_lm_splits`] cuts a corpus into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharLmConfig {
    /// Characters a window feeds the model (labels are the next ones).
    pub context: usize,
    /// Characters per split block (at least `context + 1`).
    pub block: usize,
    /// One block in `val_every` validates, another one tests (>= 3).
    pub val_every: u64,
    /// Training windows drawn (random offsets inside training blocks).
    pub train_windows: usize,
    /// Most validation (and test) windows kept (consecutive, evenly spread).
    pub max_eval_windows: usize,
    /// Seed of the training offsets.
    pub seed: u64,
}

/// Which split block `index` belongs to: 0 train, 1 val, 2 test.
pub fn block_split(index: u64, val_every: u64) -> u8 {
    // SplitMix64's finaliser: neighbouring blocks land independently.
    let mut z = index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    match (z ^ (z >> 31)) % val_every {
        0 => 1,
        1 => 2,
        _ => 0,
    }
}

fn windows(ids: &[i32], starts: &[usize], t: usize) -> Result<InMemory, DataError> {
    let (mut x, mut y) = (Vec::with_capacity(starts.len() * t), vec![]);
    for &s in starts {
        x.extend_from_slice(&ids[s..s + t]);
        y.extend_from_slice(&ids[s + 1..s + t + 1]);
    }
    let n = starts.len();
    let fields = Fields::new()
        .with("ids", HostArray::from_vec(&[n, t], x)?)?
        .with("next", HostArray::from_vec(&[n, t], y)?)?;
    Ok(InMemory::new(fields))
}

/// Train / validation / test windows of `ids` (see the module doc): fields
/// `ids` and `next`, both `i32 [n, context]`, `next[i][j] = ids[i][j + 1]`
/// in the text. Training windows start at seeded random offsets; validation
/// and test windows tile their blocks without overlap (at most
/// `max_eval_windows`, taken evenly). Deterministic in `ids` and `cfg`.
pub fn char_lm_splits(ids: &[i32], cfg: &CharLmConfig) -> Result<Splits, DataError> {
    let t = cfg.context;
    let bad = |what: String, expected: &str| DataError::ShapeMismatch {
        what,
        expected: expected.into(),
    };
    if t == 0 || cfg.block < t + 1 || cfg.val_every < 3 {
        return Err(bad(
            format!(
                "context {t}, block {}, val_every {}",
                cfg.block, cfg.val_every
            ),
            "context >= 1, block >= context + 1 and val_every >= 3",
        ));
    }
    let mut blocks: [Vec<(usize, usize)>; 3] = Default::default();
    for (k, start) in (0..ids.len()).step_by(cfg.block).enumerate() {
        let end = (start + cfg.block).min(ids.len());
        if end - start > t {
            blocks[block_split(k as u64, cfg.val_every) as usize].push((start, end));
        }
    }
    for (split, name) in [(0, "training"), (1, "validation"), (2, "test")] {
        if blocks[split].is_empty() {
            return Err(bad(
                format!("a corpus of {} characters with no {name} block", ids.len()),
                "a longer corpus, or a smaller block or val_every",
            ));
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
    let train = &blocks[0];
    let train_starts: Vec<usize> = (0..cfg.train_windows)
        .map(|_| {
            let (s, e) = train[rng.gen_range(0..train.len())];
            rng.gen_range(s..e - t)
        })
        .collect();
    let tiles = |b: &[(usize, usize)]| -> Vec<usize> {
        let all: Vec<usize> = b.iter().flat_map(|&(s, e)| (s..e - t).step_by(t)).collect();
        let keep = cfg.max_eval_windows.clamp(1, all.len().max(1));
        (0..keep).map(|i| all[i * all.len() / keep]).collect()
    };
    Ok(Splits {
        train: windows(ids, &train_starts, t)?,
        val: Some(windows(ids, &tiles(&blocks[1]), t)?),
        test: Some(windows(ids, &tiles(&blocks[2]), t)?),
    })
}
