//! `synod cli`'s interactive shell on a terminal: line editing, history in
//! `~/.synod_cli_history`, and tab completion of command names and znode paths (the children
//! of the path typed so far, asked of the server).

use crate::cli::{run_command, Client, HELP};
use anyhow::Result;
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::validate::Validator;
use rustyline::{Context, Editor, Helper};
use std::cell::RefCell;
use std::rc::Rc;

const COMMANDS: &[&str] = &[
    "ls", "get", "stat", "set", "create", "delete", "watch", "addauth", "help", "quit",
];
/// Most completions offered for one path (a node may have millions of children).
const MAX_CANDIDATES: usize = 1000;

struct Paths {
    client: Rc<RefCell<Client>>,
}

impl Completer for Paths {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let before = &line[..pos];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        if start == 0 {
            let c = COMMANDS
                .iter()
                .filter(|c| c.starts_with(word))
                .map(|c| Pair {
                    display: c.to_string(),
                    replacement: format!("{c} "),
                })
                .collect();
            return Ok((0, c));
        }
        if !word.starts_with('/') {
            return Ok((pos, Vec::new()));
        }
        let (parent, prefix) = match word.rfind('/') {
            Some(0) => ("/", &word[1..]),
            Some(i) => (&word[..i], &word[i + 1..]),
            None => return Ok((pos, Vec::new())),
        };
        let kids = self.client.borrow_mut().children(parent);
        let base = if parent == "/" { "" } else { parent };
        let c = kids
            .into_iter()
            .filter(|k| k.starts_with(prefix))
            .take(MAX_CANDIDATES)
            .map(|k| Pair {
                display: k.clone(),
                replacement: format!("{base}/{k}"),
            })
            .collect();
        Ok((start, c))
    }
}

impl Hinter for Paths {
    type Hint = String;
}
impl Highlighter for Paths {}
impl Validator for Paths {}
impl Helper for Paths {}

/// The shell; the exit status is 1 if any command failed.
pub fn interactive(client: Client) -> Result<i32> {
    let client = Rc::new(RefCell::new(client));
    let mut ed: Editor<Paths, rustyline::history::FileHistory> = Editor::new()?;
    ed.set_helper(Some(Paths {
        client: client.clone(),
    }));
    let history =
        std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".synod_cli_history"));
    if let Some(h) = &history {
        let _ = ed.load_history(h);
    }
    println!("synod cli: type help for the commands, Tab completes paths, Ctrl-D quits");
    let mut code = 0;
    loop {
        match ed.readline("synod> ") {
            Ok(line) => {
                let words: Vec<String> = line.split_whitespace().map(String::from).collect();
                if words.is_empty() {
                    continue;
                }
                let _ = ed.add_history_entry(line.as_str());
                match run_command(&mut client.borrow_mut(), &words) {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) => {
                        println!("{e}");
                        code = 1;
                    }
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                println!("{e}\n{HELP}");
                break;
            }
        }
    }
    if let Some(h) = &history {
        let _ = ed.save_history(h);
    }
    client.borrow_mut().close();
    Ok(code)
}
