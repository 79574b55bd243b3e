//! A hostile test plugin: attacks the host the way a hostile tenant would
//! (issue 10), so that the host's tests can show each attack is stopped.
//! Not an example: it skips the SDK's `export_plugin!` and calls the raw
//! `delivery`, `log` and stderr imports itself, in and out of protocol.
//!
//! Its configuration (the JSON given to `init`) picks one attack; `name`
//! picks the object whose notification carries it (`*`, the default:
//! every one). Other notifications are handled like `recorder`'s, through
//! the protocol as the SDK speaks it (`begin`, one log line, `done`).
//!
//! | `attack`        | what the target notification does                              |
//! |-----------------|----------------------------------------------------------------|
//! | `none`          | nothing more (a recorder)                                      |
//! | `rearm`         | `how`: `out-of-range` calls `begin(items + k)`; `backwards`    |
//! |                 | `begin(i)` then `done(i - 1)`; `repeat` `begin(i)` again and   |
//! |                 | again; `rounds` times, `work` spins before each, so a host     |
//! |                 | that re-arms on each call gives it `rounds` calls' budgets     |
//! | `done-flood`    | `done(items + k, Some(<bytes>))`, `count` times                |
//! | `done-error`    | `done(i, Some(<bytes>))`: one in-range, huge error            |
//! | `big-error`     | returns (or reports) an error of `bytes` bytes                 |
//! | `log-flood`     | logs `lines` lines of `bytes` bytes                            |
//! | `stderr-flood`  | writes `lines` lines of `bytes` bytes to stderr                |
//! | `lend-leak`     | `begin(i)`, then lends its object `count` times and never     |
//! |                 | drops a handle                                                 |
//! | `slow-init`     | (in `init`) spins `spins` times, forever when 0, then is fine  |
//! | `init-error`    | (in `init`) returns an error of `bytes` bytes                  |
//! | `script`        | runs `steps` on every call (below), ignoring `name`            |
//! | `batch-trap`    | every `on-batch` call traps before any item begins; one        |
//! |                 | notification per call is handled as `none` handles it         |
//!
//! Outside `on-batch` (one notification per call) the `delivery` calls of
//! an attack are made all the same: they are out of protocol there.
//!
//! A `script` step is one of `{"begin": i}`, `{"done": [i, bytes]}` (an
//! error of `bytes` bytes; `null` for none), `{"log": [lines, bytes]}`,
//! `{"stderr": [lines, bytes]}`, `{"lend": [slot, keep]}` (`keep`: leak the
//! handle), `{"spin": n}`, `{"sleep": ms}`, `{"pointer": n}` (`n` JSON
//! pointer reads of slot 0's object), `{"metadata": n}` (`n` calls of
//! `delivery.metadata`), `"trap"`, `"ok"` or `{"err": bytes}`; the last
//! three end the call (`on-batch` returns no result: there they only end
//! it). A script is the protocol fuzzer's input: indices, counts and sizes
//! are whatever it drew.

use std::cell::RefCell;
use std::io::Write as _;

use informer_guest::__private::{RawDeleted, RawObject};
use informer_guest::bindings::exports::informer_host::plugin::{batch_handler, resource_event_handler};
use informer_guest::bindings::informer_host::plugin::delivery;
use informer_guest::{Config, Deleted, Object};

#[derive(Default)]
struct Settings {
    attack: Attack,
    /// The object name whose notification carries the attack (`*`: all).
    name: Option<String>,
}

impl Settings {
    /// `{"attack": ..., "name": ..., <the attack's fields>}`; a misspelt
    /// field is an error, so that no test runs an attack it did not mean.
    fn parse(config: &Config) -> Result<Self, String> {
        let mut fields: serde_json::Map<String, serde_json::Value> = config.parse()?;
        let name = match fields.remove("name") {
            None => None,
            Some(serde_json::Value::String(name)) => Some(name),
            Some(other) => return Err(format!("`name` must be a string, not {other}")),
        };
        fields.entry("attack").or_insert_with(|| "none".into());
        let attack = serde_json::from_value(fields.into()).map_err(|e| format!("invalid hostile config: {e}"))?;
        Ok(Settings { attack, name })
    }
}

#[derive(Default, serde::Deserialize)]
#[serde(tag = "attack", rename_all = "kebab-case", deny_unknown_fields)]
enum Attack {
    #[default]
    None,
    Rearm {
        how: Rearm,
        #[serde(default = "many")]
        rounds: u64,
        #[serde(default)]
        work: u64,
    },
    DoneFlood {
        count: u32,
        bytes: usize,
    },
    DoneError {
        bytes: usize,
    },
    BigError {
        bytes: usize,
    },
    LogFlood {
        lines: u32,
        bytes: usize,
    },
    StderrFlood {
        lines: u32,
        bytes: usize,
    },
    LendLeak {
        count: u32,
    },
    SlowInit {
        spins: u64,
    },
    /// `init` sleeps (`std::thread::sleep`: a WASI clock subscription the
    /// host blocks on) for `ms` milliseconds; `u64::MAX` is for ever.
    SleepInit {
        ms: u64,
    },
    InitError {
        bytes: usize,
    },
    Script {
        steps: Vec<Step>,
    },
    BatchTrap,
}

fn many() -> u64 {
    1_000_000
}

#[derive(Clone, Copy, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Rearm {
    OutOfRange,
    Backwards,
    Repeat,
}

#[derive(Clone, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Step {
    Begin(u32),
    Done(u32, Option<usize>),
    Log(u32, usize),
    Stderr(u32, usize),
    Lend(u32, bool),
    Spin(u64),
    /// Sleeps `ms` milliseconds (`u64::MAX`: for ever).
    Sleep(u64),
    /// Reads a JSON pointer of slot 0's object `n` times (each makes the
    /// host parse the whole object).
    Pointer(u32),
    /// Asks for the batch's metadata `n` times (each makes the host copy
    /// every record into the guest).
    Metadata(u32),
    Trap,
    Ok,
    Err(usize),
}

thread_local! {
    static SETTINGS: RefCell<Settings> = RefCell::new(Settings::default());
}

/// Burns about `n` loop iterations of fuel and time (forever when `n` is
/// `u64::MAX`).
fn spin(n: u64) {
    let mut i: u64 = 0;
    while i < n {
        i = std::hint::black_box(i + 1);
    }
}

/// Sleeps `ms` milliseconds, again and again for `u64::MAX` (a sleep
/// that returns early is tried again: only a trap ends it).
fn sleep(ms: u64) {
    loop {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        if ms != u64::MAX {
            return;
        }
    }
}

/// `bytes` bytes of text.
fn text(bytes: usize) -> String {
    "x".repeat(bytes)
}

#[cfg(feature = "log")]
fn log(message: &str) {
    use informer_guest::bindings::informer_host::plugin::log;
    log::log(log::Level::Info, message);
}

#[cfg(not(feature = "log"))]
fn log(_message: &str) {}

fn stderr(lines: u32, bytes: usize) {
    let line = format!("{}\n", text(bytes));
    let mut err = std::io::stderr().lock();
    for _ in 0..lines {
        let _ = err.write_all(line.as_bytes());
    }
    let _ = err.flush();
}

/// How a call ends after its attack: normally (the item is then logged
/// like `recorder` does), or with this result right away.
enum Outcome {
    Continue,
    Return(Result<(), String>),
}

/// The notification in flight, as the attacks need it. Outside a batch it
/// is item 0 of 1 in slot 0, and the `delivery` calls that use it are out
/// of protocol.
struct Item {
    /// Its index in the `on-batch` call.
    index: u32,
    /// Items of the `on-batch` call.
    items: u32,
    /// The batch slot of its object.
    slot: u32,
}

const SINGLE: Item = Item { index: 0, items: 1, slot: 0 };

fn attack(attack: &Attack, item: &Item) -> Outcome {
    let i = item.index;
    match attack {
        Attack::None
        | Attack::SlowInit { .. }
        | Attack::SleepInit { .. }
        | Attack::InitError { .. }
        | Attack::Script { .. }
        | Attack::BatchTrap => {}
        Attack::Rearm { how, rounds, work } => {
            if !matches!(how, Rearm::OutOfRange) {
                delivery::begin(i);
            }
            for round in 0..*rounds {
                spin(*work);
                match how {
                    Rearm::OutOfRange => delivery::begin(item.items.saturating_add(round as u32)),
                    Rearm::Backwards => delivery::done(i.wrapping_sub(1), None),
                    Rearm::Repeat => delivery::begin(i),
                }
            }
        }
        Attack::DoneFlood { count, bytes } => {
            let error = text(*bytes);
            for k in 0..*count {
                delivery::done(item.items.saturating_add(k), Some(&error));
            }
        }
        Attack::DoneError { bytes } => {
            delivery::done(i, Some(&text(*bytes)));
            return Outcome::Return(Ok(()));
        }
        Attack::BigError { bytes } => return Outcome::Return(Err(text(*bytes))),
        Attack::LogFlood { lines, bytes } => {
            let line = text(*bytes);
            for _ in 0..*lines {
                log(&line);
            }
        }
        Attack::StderrFlood { lines, bytes } => stderr(*lines, *bytes),
        Attack::LendLeak { count } => {
            // Claims the item first: the trap that follows is its own.
            delivery::begin(i);
            for _ in 0..*count {
                // Leaked on purpose: a handle the guest never drops.
                std::mem::forget(delivery::lend(item.slot));
            }
        }
    }
    Outcome::Continue
}

/// Runs a script's steps; `Some(result)` when a step ended the call.
fn script(steps: &[Step]) -> Option<Result<(), String>> {
    for step in steps {
        match *step {
            Step::Begin(i) => delivery::begin(i),
            Step::Done(i, error) => delivery::done(i, error.map(text).as_deref()),
            Step::Log(lines, bytes) => (0..lines).for_each(|_| log(&text(bytes))),
            Step::Stderr(lines, bytes) => stderr(lines, bytes),
            Step::Lend(slot, keep) => {
                let handle = delivery::lend(slot);
                if keep {
                    std::mem::forget(handle);
                }
            }
            Step::Spin(n) => spin(n),
            Step::Sleep(ms) => sleep(ms),
            Step::Pointer(n) => {
                let object = delivery::lend(0);
                for _ in 0..n {
                    std::hint::black_box(object.pointer("/nope"));
                }
            }
            Step::Metadata(n) => {
                for _ in 0..n {
                    std::hint::black_box(delivery::metadata());
                }
            }
            Step::Trap => std::process::abort(),
            Step::Ok => return Some(Ok(())),
            Step::Err(bytes) => return Some(Err(text(bytes))),
        }
    }
    None
}

fn targets(settings: &Settings, name: &str) -> bool {
    settings.name.as_deref().is_none_or(|n| n == "*" || n == name)
}

/// One notification outside a batch: `describe` is its recorder line.
fn single(object: Object, describe: impl FnOnce(&Object) -> String) -> Result<(), String> {
    SETTINGS.with_borrow(|s| {
        if let Attack::Script { steps } = &s.attack {
            return script(steps).unwrap_or(Ok(()));
        }
        if targets(s, &object.name())
            && let Outcome::Return(r) = attack(&s.attack, &SINGLE)
        {
            return r;
        }
        log(&describe(&object));
        Ok(())
    })
}

struct Hostile;

impl resource_event_handler::Guest for Hostile {
    fn init(config: String) -> Result<(), String> {
        let settings = Settings::parse(&Config::new(config.clone()))?;
        match settings.attack {
            Attack::SlowInit { spins: 0 } => spin(u64::MAX),
            Attack::SlowInit { spins } => spin(spins),
            Attack::SleepInit { ms } => sleep(ms),
            Attack::InitError { bytes } => return Err(text(bytes)),
            _ => {}
        }
        log(&format!("init {config}"));
        SETTINGS.set(settings);
        Ok(())
    }

    fn on_add(obj: RawObject, is_in_initial_list: bool) -> Result<(), String> {
        single(obj.into(), |o| informer_guest::describe::add(o, is_in_initial_list))
    }

    fn on_update(old: RawObject, new: RawObject) -> Result<(), String> {
        let old = Object::from(old);
        single(new.into(), |new| informer_guest::describe::update(&old, new))
    }

    fn on_delete(obj: RawDeleted) -> Result<(), String> {
        let deleted = Deleted::from(obj);
        let name = deleted.name();
        SETTINGS.with_borrow(|s| {
            if let Attack::Script { steps } = &s.attack {
                return script(steps).unwrap_or(Ok(()));
            }
            if targets(s, &name)
                && let Outcome::Return(r) = attack(&s.attack, &SINGLE)
            {
                return r;
            }
            log(&informer_guest::describe::delete(&deleted));
            Ok(())
        })
    }
}

impl batch_handler::Guest for Hostile {
    fn on_batch(kinds: Vec<u8>, tombstone_keys: Vec<String>) {
        SETTINGS.with_borrow(|s| {
            if let Attack::Script { steps } = &s.attack {
                script(steps);
                return;
            }
            if let Attack::BatchTrap = s.attack {
                panic!("batch-trap: trapping before any item begins");
            }
            let items = kinds.len() as u32;
            let mut keys = tombstone_keys.into_iter();
            let mut slot = 0u32;
            for (index, kind) in (0u32..).zip(kinds) {
                // An update's object of interest is its new one.
                let (first, own) = if kind == 2 { (slot, slot + 1) } else { (slot, slot) };
                slot = own + 1;
                let object = Object::from(delivery::lend(own));
                if targets(s, &object.name()) {
                    let item = Item { index, items, slot: own };
                    if let Outcome::Return(r) = attack(&s.attack, &item) {
                        // Reported as the SDK does: `done` once, with the error.
                        if let Err(e) = r {
                            delivery::done(index, Some(&e));
                        }
                        continue;
                    }
                }
                let line = match kind {
                    0 | 1 => informer_guest::describe::add(&object, kind == 1),
                    2 => informer_guest::describe::update(&Object::from(delivery::lend(first)), &object),
                    3 => informer_guest::describe::delete(&Deleted::Object(object)),
                    _ => informer_guest::describe::delete(&Deleted::UnknownFinalState(informer_guest::Tombstone {
                        key: keys.next().unwrap_or_default(),
                        last_known: Some(object),
                    })),
                };
                delivery::begin(index);
                log(&line);
                delivery::done(index, None);
            }
        });
    }
}

informer_guest::bindings::__export_plugin_bindings!(Hostile with_types_in informer_guest::bindings);
