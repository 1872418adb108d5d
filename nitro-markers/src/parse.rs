//! A small recursive-descent parser for the `ConfigValue` literal syntax.

use crate::ConfigValue;

/// Nesting limit: a CLI override deeper than this is a mistake, and the limit
/// keeps hostile input from overflowing the stack.
const MAX_DEPTH: usize = 32;

pub(crate) fn parse_value(text: &str) -> Result<ConfigValue, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
        src: text,
    };
    let v = p.value(0)?;
    p.ws();
    if p.pos != p.s.len() {
        return Err(format!("unexpected `{}` at byte {}", &text[p.pos..], p.pos));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    src: &'a str,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Result<ConfigValue, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        self.ws();
        match self.peek() {
            Some(b'[') => self.seq(depth, b']').map(ConfigValue::List),
            Some(b'{') => self.map(depth),
            Some(b'"') => self.quoted().map(ConfigValue::Str),
            Some(_) => Ok(self.word()),
            None => Err("expected a value, found the end of the input".into()),
        }
    }

    fn seq(&mut self, depth: usize, close: u8) -> Result<Vec<ConfigValue>, String> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(items);
            }
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {}
                _ => return Err(format!("expected `,` or `{}`", close as char)),
            }
        }
    }

    fn map(&mut self, depth: usize) -> Result<ConfigValue, String> {
        self.pos += 1;
        let mut entries = Vec::new();
        loop {
            self.ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                return Ok(ConfigValue::Map(entries));
            }
            let k = self.value(depth + 1)?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err("expected `:` after a map key".into());
            }
            self.pos += 1;
            let v = self.value(depth + 1)?;
            entries.push((k, v));
            self.ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {}
                _ => return Err("expected `,` or `}`".into()),
            }
        }
    }

    fn quoted(&mut self) -> Result<String, String> {
        self.pos += 1;
        let mut out = String::new();
        let rest = &self.src[self.pos..];
        let mut chars = rest.char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, c)) => out.push(c),
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err("unterminated string".into())
    }

    /// A bare token up to a delimiter: a keyword, a number, or a string.
    fn word(&mut self) -> ConfigValue {
        let start = self.pos;
        while let Some(c) = self.peek() {
            if b",]}:".contains(&c) {
                break;
            }
            self.pos += 1;
        }
        let w = self.src[start..self.pos].trim_end();
        self.pos = start + w.len();
        match w {
            "none" => ConfigValue::None,
            "true" => ConfigValue::Bool(true),
            "false" => ConfigValue::Bool(false),
            _ => {
                if let Ok(i) = w.parse::<i128>() {
                    ConfigValue::Int(i)
                } else if let Some(x) = parse_float(w) {
                    ConfigValue::Float(x)
                } else {
                    ConfigValue::Str(w.to_string())
                }
            }
        }
    }
}

/// Rust's float syntax, minus the words (`inf`, `nan`) that would otherwise
/// turn an innocent string such as `info` into a float.
fn parse_float(w: &str) -> Option<f64> {
    let digits = w.trim_start_matches(['-', '+']);
    let numeric = digits.starts_with(|c: char| c.is_ascii_digit() || c == '.');
    if numeric {
        w.parse().ok()
    } else {
        match digits {
            "inf" | "nan" => w.parse().ok(),
            _ => None,
        }
    }
}
