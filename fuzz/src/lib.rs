//! Mutation fuzzing on stable Rust (cargo-fuzz needs nightly, which these machines cannot
//! fetch): each target's seed corpus lives in `fuzz/corpus/TARGET/`; every seed runs as is,
//! then mutated copies (bit flips, interesting bytes, insertions, deletions, duplicated and
//! spliced ranges, the target's dictionary tokens) from a seeded ChaCha generator, so a run
//! is reproducible from its seed. An input that panics is saved under the target directory
//! and reported with its path. Each test binary also installs [`CountingAllocator`], and an
//! input whose parse grows the heap by more than [`HEAP_LIMIT`] fails as an unbounded
//! allocation.
//!
//! JSON seeds are also mutated as JSON (a node replaced by an odd value or by a piece of
//! another seed, removed, duplicated), which reaches typed parsing and validation that byte
//! flips rarely get past.
//!
//! `METAL_FUZZ_ITERATIONS` (default 20000 per target: bounded for CI) and `METAL_FUZZ_SEED`
//! change the run; `METAL_FUZZ_SECONDS` runs each target for that long instead.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rand::{Rng as _, SeedableRng as _};

/// The most an input may grow the heap while it is parsed.
pub const HEAP_LIMIT: usize = 256 << 20;

/// Longest mutated input.
const MAX_INPUT: usize = 256 << 10;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

/// The system allocator, counting this thread's live bytes and their peak.
#[derive(Debug)]
pub struct CountingAllocator;

fn account(delta: isize) {
    // try_with: the thread's counters may already be gone while it exits.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds the
// GlobalAlloc contract; the bookkeeping touches only const-initialised thread-locals (no
// allocation, no re-entry).
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        account(isize::try_from(layout.size()).unwrap_or(isize::MAX));
        // SAFETY: the caller's layout is passed through as received.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        account(-isize::try_from(layout.size()).unwrap_or(isize::MAX));
        // SAFETY: `ptr` came from `System.alloc` with this layout (every allocation here does).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let grown = isize::try_from(new_size).unwrap_or(isize::MAX) - isize::try_from(layout.size()).unwrap_or(0);
        account(grown);
        // SAFETY: forwarded as received; `ptr` was allocated by `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Installs [`CountingAllocator`] as the test binary's global allocator.
#[macro_export]
macro_rules! counting_allocator {
    () => {
        #[global_allocator]
        static ALLOCATOR: $crate::CountingAllocator = $crate::CountingAllocator;
    };
}

/// Runs `f` and returns how far it grew this thread's heap above where it started.
fn heap_growth(f: impl FnOnce()) -> usize {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    f();
    usize::try_from(PEAK.with(Cell::get) - start).unwrap_or(0)
}

/// How long or how often to run.
enum Budget {
    Iterations(u64),
    Time(Duration),
}

fn budget() -> Budget {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    match (env("METAL_FUZZ_SECONDS"), env("METAL_FUZZ_ITERATIONS")) {
        (Some(seconds), _) => Budget::Time(Duration::from_secs(seconds)),
        (None, Some(n)) => Budget::Iterations(n),
        (None, None) => Budget::Iterations(20_000),
    }
}

/// The corpus directory of `target`.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target)
}

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("the corpus of {target} ({}): {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert!(!seeds.is_empty(), "the corpus of {target} is empty");
    seeds
}

const INTERESTING: [u8; 10] = [0, 1, 0x7f, 0x80, 0xff, b'"', b'\\', b'{', b'[', b'\n'];

/// Values a JSON mutation puts in place of another.
fn json_value(rng: &mut rand_chacha::ChaCha8Rng, seeds: &[serde_json::Value]) -> serde_json::Value {
    use serde_json::json;
    match rng.gen_range(0..14) {
        0 => json!(null),
        1 => json!(true),
        2 => json!(0),
        3 => json!(-1),
        4 => json!(u64::MAX),
        5 => json!(i64::MIN),
        6 => json!(1e300),
        7 => json!(""),
        8 => json!("\u{0}\u{202e}é".repeat(rng.gen_range(1..64))),
        9 => json!([]),
        10 => json!({}),
        11 => json!("x".repeat(rng.gen_range(0..70_000))),
        _ => {
            // A piece of another seed: a field of the right shape in the wrong place.
            let mut pick = seeds[rng.gen_range(0..seeds.len())].clone();
            for _ in 0..rng.gen_range(0..4) {
                pick = match &pick {
                    serde_json::Value::Object(m) if !m.is_empty() => {
                        m.values().nth(rng.gen_range(0..m.len())).cloned().unwrap()
                    }
                    serde_json::Value::Array(a) if !a.is_empty() => a[rng.gen_range(0..a.len())].clone(),
                    _ => break,
                };
            }
            pick
        }
    }
}

/// Changes one node of `value`: replaced, removed from its object or array, or duplicated.
fn mutate_json(rng: &mut rand_chacha::ChaCha8Rng, value: &mut serde_json::Value, seeds: &[serde_json::Value]) {
    use serde_json::Value;
    let descend = rng.gen_range(0..4) != 0;
    match value {
        Value::Object(map) if !map.is_empty() && descend => {
            let key = map.keys().nth(rng.gen_range(0..map.len())).cloned().unwrap();
            match rng.gen_range(0..6) {
                0 => {
                    map.remove(&key);
                }
                1 => {
                    let v = json_value(rng, seeds);
                    map.insert(format!("{key}_"), v);
                }
                _ => mutate_json(rng, map.get_mut(&key).unwrap(), seeds),
            }
        }
        Value::Array(items) if !items.is_empty() && descend => {
            let at = rng.gen_range(0..items.len());
            match rng.gen_range(0..6) {
                0 => {
                    items.remove(at);
                }
                1 => {
                    let copy = items[at].clone();
                    items.insert(at, copy);
                }
                _ => mutate_json(rng, &mut items[at], seeds),
            }
        }
        _ => *value = json_value(rng, seeds),
    }
}

/// One mutated copy of a seed: for a JSON seed, half the time a change to its structure.
fn mutate(rng: &mut rand_chacha::ChaCha8Rng, seeds: &[Vec<u8>], dictionary: &[&[u8]]) -> Vec<u8> {
    let index = rng.gen_range(0..seeds.len());
    if rng.gen_range(0..2) == 0 {
        let parsed: Vec<serde_json::Value> = seeds.iter().filter_map(|s| serde_json::from_slice(s).ok()).collect();
        if let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&seeds[index]) {
            for _ in 0..rng.gen_range(1..=3) {
                mutate_json(rng, &mut value, &parsed);
            }
            return serde_json::to_vec(&value).unwrap_or_default();
        }
    }
    let mut data = seeds[index].clone();
    for _ in 0..rng.gen_range(1..=8) {
        let len = data.len();
        let at = if len == 0 { 0 } else { rng.gen_range(0..len) };
        match rng.gen_range(0..8) {
            0 if len > 0 => data[at] ^= 1 << rng.gen_range(0..8),
            1 if len > 0 => data[at] = INTERESTING[rng.gen_range(0..INTERESTING.len())],
            2 => {
                let bytes: Vec<u8> = (0..rng.gen_range(1..=16)).map(|_| rng.r#gen()).collect();
                data.splice(at..at, bytes);
            }
            3 if len > 0 => {
                let end = (at + rng.gen_range(1..=64)).min(len);
                data.drain(at..end);
            }
            4 if len > 0 => {
                let end = (at + rng.gen_range(1..=64)).min(len);
                let copy = data[at..end].to_vec();
                let to = rng.gen_range(0..=len);
                data.splice(to..to, copy);
            }
            5 if !dictionary.is_empty() => {
                let token = dictionary[rng.gen_range(0..dictionary.len())];
                data.splice(at..at, token.iter().copied());
            }
            6 => {
                let other = &seeds[rng.gen_range(0..seeds.len())];
                if !other.is_empty() {
                    let from = rng.gen_range(0..other.len());
                    let end = (from + rng.gen_range(1..=256)).min(other.len());
                    data.splice(at..at, other[from..end].iter().copied());
                }
            }
            7 if len > 0 => data.truncate(at),
            _ => {}
        }
    }
    data.truncate(MAX_INPUT);
    data
}

/// What one input did wrong.
fn failure(target: &str, input: &[u8], what: &str) -> ! {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new("."))
        .join("target/fuzz-failures")
        .join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let name = hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(input)[..8]);
    let path = dir.join(&name);
    std::fs::write(&path, input).unwrap();
    panic!(
        "{target}: {what} on the input saved as {} ({} bytes; add it to fuzz/corpus/{target}/ once fixed)",
        path.display(),
        input.len()
    );
}

/// Runs `parse` on every seed of `target`'s corpus and then on mutated inputs, failing on
/// the first input that panics or grows the heap by more than [`HEAP_LIMIT`]. Returns how
/// many inputs ran.
pub fn run(target: &str, dictionary: &[&[u8]], parse: impl Fn(&[u8])) -> u64 {
    run_seeds(target, &corpus(target), dictionary, parse)
}

/// [`run`] from these seeds instead of the corpus in the tree.
pub fn run_seeds(target: &str, seeds: &[Vec<u8>], dictionary: &[&[u8]], parse: impl Fn(&[u8])) -> u64 {
    let seed = std::env::var("METAL_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x006d_6574_616c_u64);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let check = |input: &[u8]| {
        let mut outcome = Ok(());
        let growth = heap_growth(|| {
            outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| parse(input)));
        });
        if outcome.is_err() {
            failure(target, input, "a panic");
        }
        if growth > HEAP_LIMIT {
            failure(target, input, &format!("a heap growth of {growth} bytes"));
        }
    };
    for input in seeds {
        check(input);
    }
    let started = Instant::now();
    let mut ran = seeds.len() as u64;
    loop {
        let more = match budget() {
            Budget::Iterations(n) => ran < n,
            Budget::Time(limit) => started.elapsed() < limit,
        };
        if !more {
            break;
        }
        check(&mutate(&mut rng, seeds, dictionary));
        ran += 1;
    }
    eprintln!("{target}: {ran} inputs in {:.1?} (seed {seed})", started.elapsed());
    ran
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mutations_are_reproducible_from_the_seed_and_change_the_input() {
        let seeds = vec![b"{\"a\": [1, 2, 3]}".to_vec()];
        let run = |seed| {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            (0..50).map(|_| mutate(&mut rng, &seeds, &[b"null"])).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert!(run(1).iter().any(|m| m != &seeds[0]));
    }
}
