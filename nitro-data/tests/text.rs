//! `nitro_data::text`: the character vocabulary, the corpus reader, the
//! unigram entropy and the deterministic language-model split.

use nitro_data::text::{
    block_split, char_lm_splits, corpus_files, read_corpus, unigram_entropy_bits, CharLmConfig,
    CharVocab,
};
use nitro_data::{Dataset, InMemory};
use proptest::prelude::*;

#[test]
fn vocabulary_is_newline_printable_ascii_and_one_unknown() {
    assert_eq!(CharVocab::id('\n'), 0);
    assert_eq!(CharVocab::id(' '), 1);
    assert_eq!(CharVocab::id('A'), 34);
    assert_eq!(CharVocab::id('}'), 94);
    for c in ['~', '\t', '\r', 'é', '—', '\u{0}'] {
        assert_eq!(CharVocab::id(c), CharVocab::UNKNOWN, "{c:?}");
    }
    // Every id in range decodes to a distinct character that encodes back.
    let all: Vec<i32> = (0..CharVocab::SIZE as i32).collect();
    let text = CharVocab::decode(&all);
    assert_eq!(CharVocab::encode(&text), all);
    assert_eq!(
        CharVocab::decode(&CharVocab::encode("fn main() {}\n")),
        "fn main() {}\n"
    );
}

#[test]
fn unigram_entropy_matches_closed_forms() {
    assert_eq!(unigram_entropy_bits(&[]), 0.0);
    assert_eq!(unigram_entropy_bits(&[3, 3, 3]), 0.0);
    assert!((unigram_entropy_bits(&[1, 2, 3, 4]) - 2.0).abs() < 1e-12);
    // p = (1/2, 1/4, 1/4): 1.5 bits.
    assert!((unigram_entropy_bits(&[7, 7, 8, 9]) - 1.5).abs() < 1e-12);
}

fn rows(d: &InMemory, field: &str) -> Vec<i32> {
    d.as_fields()
        .require(field)
        .unwrap()
        .as_slice::<i32>()
        .unwrap()
        .to_vec()
}

fn cfg(context: usize, train_windows: usize) -> CharLmConfig {
    CharLmConfig {
        context,
        block: 64,
        val_every: 5,
        train_windows,
        max_eval_windows: 1000,
        seed: 3,
    }
}

#[test]
fn block_split_agrees_with_the_python_twin() {
    // What peers/tiny_gpt_twin.py's `block_split` gives for blocks 0..12
    // at val_every 20: the two implementations agree.
    let twin = [0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0];
    let ours: Vec<u8> = (0..12).map(|k| block_split(k, 20)).collect();
    assert_eq!(ours, twin);
}

#[test]
fn too_short_a_corpus_or_bad_config_is_refused() {
    let ids = vec![1; 100];
    assert!(
        char_lm_splits(&ids, &cfg(8, 10)).is_err(),
        "no val/test block"
    );
    let mut c = cfg(64, 10);
    c.block = 64;
    assert!(
        char_lm_splits(&vec![1; 10_000], &c).is_err(),
        "block < context + 1"
    );
}

#[test]
fn corpus_folders_read_in_path_order_skipping_build_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("b")).unwrap();
    std::fs::create_dir_all(p.join("target")).unwrap();
    std::fs::create_dir_all(p.join(".git")).unwrap();
    std::fs::write(p.join("b/z.rs"), "Z").unwrap();
    std::fs::write(p.join("a.md"), "A").unwrap();
    std::fs::write(p.join("c.txt"), "no").unwrap();
    std::fs::write(p.join("target/t.rs"), "no").unwrap();
    std::fs::write(p.join(".git/g.md"), "no").unwrap();
    assert_eq!(corpus_files(p).unwrap().len(), 2);
    assert_eq!(read_corpus(p).unwrap(), "A\nZ\n");
    assert_eq!(read_corpus(&p.join("c.txt")).unwrap(), "no");
    std::fs::write(p.join("bad.md"), [0xffu8, 0xfe]).unwrap();
    let e = read_corpus(p).unwrap_err().to_string();
    assert!(e.contains("bad.md") && e.contains("UTF-8"), "{e}");
    let empty = tempfile::tempdir().unwrap();
    assert!(read_corpus(empty.path()).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Labels are the next characters, the split is a function of the
    /// corpus and the config, and no validation or test window shares a
    /// block with a training window.
    #[test]
    fn windows_are_shifted_deterministic_and_disjoint(
        text in proptest::collection::vec(0i32..96, 3000..6000),
        context in 2usize..16,
    ) {
        let c = cfg(context, 50);
        let a = char_lm_splits(&text, &c).unwrap();
        let b = char_lm_splits(&text, &c).unwrap();
        let (val, test) = (a.val.as_ref().unwrap(), a.test.as_ref().unwrap());
        for split in [&a.train, val, test] {
            let (x, y) = (rows(split, "ids"), rows(split, "next"));
            for (wx, wy) in x.chunks(context).zip(y.chunks(context)) {
                prop_assert_eq!(&wx[1..], &wy[..context - 1]);
                // The window occurs in the corpus at some start.
                let found = (0..text.len() - context).any(|s| text[s..s + context] == *wx && text[s + 1..s + context + 1] == *wy);
                prop_assert!(found);
            }
        }
        prop_assert_eq!(rows(&a.train, "ids"), rows(&b.train, "ids"));
        prop_assert_eq!(rows(val, "ids"), rows(b.val.as_ref().unwrap(), "ids"));
        prop_assert_eq!(a.train.len(), 50);
        let mut other = c;
        other.seed = 4;
        let d = char_lm_splits(&text, &other).unwrap();
        prop_assert_eq!(rows(val, "ids"), rows(d.val.as_ref().unwrap(), "ids"), "eval windows ignore the seed");
    }
}
