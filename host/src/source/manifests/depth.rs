//! The depth of YAML before it is parsed: one linear pass that finds where
//! a document nests deeper than the limit, so libyaml never spends
//! quadratic time on it.

/// Where a YAML document first nests deeper than `limit`, as a 0-based
/// line and column (in characters) of `text`; None when it never does, or
/// when libyaml would stop at a syntax error before.
///
/// libyaml, which serde_yaml runs, spends time on every token in proportion
/// to the flow nesting around it, and serde_yaml counts levels only once
/// libyaml has scanned the whole document: 100 000 levels of `[` (200 KB)
/// cost tens of seconds before serde_yaml refuses them. This pass follows
/// the structure of libyaml's scanner, linearly: its flow level and its
/// stack of block indentation columns, skipping comments, scalars (plain,
/// quoted, block), anchors, aliases and tags the way it does. Each flow
/// level and each block indentation level is a mapping or sequence of its
/// own, so in a document libyaml accepts their sum is never more than the
/// real depth; the few collections that open no level of their own (a
/// sequence at its key's indentation, a one-pair mapping inside a flow
/// sequence) are counted exactly after parsing, where they cost nothing.
pub(super) fn yaml_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let mut scan = DepthScan {
        b: text.as_bytes(),
        i: 0,
        line: 0,
        col: 0,
        index: 0,
        limit,
        flow: 0,
        indent: -1,
        indents: Vec::new(),
        simple_key_allowed: true,
        keys: vec![None],
    };
    match scan.run() {
        Err(Stop::TooDeep(line, col)) => Some((line, col)),
        Ok(()) | Err(Stop::SyntaxError) => None,
    }
}

enum Stop {
    /// The first level too many opens here (line, column).
    TooDeep(usize, usize),
    /// libyaml stops with an error here.
    SyntaxError,
}

/// A possible simple key (a mapping key without `?`): libyaml's
/// `yaml_simple_key_t`.
#[derive(Clone, Copy)]
struct SimpleKey {
    line: usize,
    index: usize,
    col: usize,
}

/// The part of libyaml's scanner state that decides nesting.
struct DepthScan<'a> {
    b: &'a [u8],
    /// Byte offset.
    i: usize,
    line: usize,
    /// Column and index in characters, as libyaml counts them.
    col: usize,
    index: usize,
    limit: usize,
    flow: usize,
    /// Column of the innermost block collection (-1: none).
    indent: isize,
    indents: Vec<isize>,
    simple_key_allowed: bool,
    /// The possible simple key of the block context, then of each flow level.
    keys: Vec<Option<SimpleKey>>,
}

impl DepthScan<'_> {
    fn byte(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }
    /// The end of the text (libyaml also ends at a NUL).
    fn at_end(&self, i: usize) -> bool {
        self.byte(i) == 0
    }
    /// Length of the line break at `i` (0 when none): LF, CR, CRLF, NEL, LS, PS.
    fn break_len(&self, i: usize) -> usize {
        match (self.byte(i), self.byte(i + 1), self.byte(i + 2)) {
            (b'\r', b'\n', _) => 2,
            (b'\r' | b'\n', _, _) => 1,
            (0xC2, 0x85, _) => 2,
            (0xE2, 0x80, 0xA8 | 0xA9) => 3,
            _ => 0,
        }
    }
    fn is_blank(&self, i: usize) -> bool {
        matches!(self.byte(i), b' ' | b'\t')
    }
    fn is_breakz(&self, i: usize) -> bool {
        self.break_len(i) > 0 || self.at_end(i)
    }
    fn is_blankz(&self, i: usize) -> bool {
        self.is_blank(i) || self.is_breakz(i)
    }
    /// `---` or `...` at the start of a line, followed by a blank or a break.
    fn document_marker(&self) -> bool {
        self.col == 0
            && self.b.get(self.i..).is_some_and(|rest| rest.starts_with(b"---") || rest.starts_with(b"..."))
            && self.is_blankz(self.i + 3)
    }

    /// Skips one character.
    fn skip(&mut self) {
        if self.i >= self.b.len() {
            return;
        }
        let width = match self.byte(self.i) {
            0..0x80 => 1,
            0x80..0xE0 => 2,
            0xE0..0xF0 => 3,
            _ => 4,
        };
        self.i += width;
        self.col += 1;
        self.index += 1;
    }
    /// Skips one line break.
    fn skip_break(&mut self) {
        self.i += self.break_len(self.i);
        self.line += 1;
        self.col = 0;
        self.index += 1;
    }

    fn too_deep(&self) -> Result<(), Stop> {
        if self.indents.len() + self.flow > self.limit {
            return Err(Stop::TooDeep(self.line, self.col));
        }
        Ok(())
    }
    /// A block collection starts at `col` if it is right of the current one.
    fn roll_indent(&mut self, col: usize) -> Result<(), Stop> {
        if self.flow == 0 && self.indent < col as isize {
            self.indents.push(self.indent);
            self.indent = col as isize;
            if self.indents.len() > self.limit {
                // A key is on the line of its `:`.
                return Err(Stop::TooDeep(self.line, col));
            }
        }
        Ok(())
    }
    /// Block collections right of `col` end.
    fn unroll_indent(&mut self, col: isize) {
        while self.flow == 0 && self.indent > col {
            self.indent = self.indents.pop().unwrap_or(-1);
        }
    }
    fn save_simple_key(&mut self) {
        if self.simple_key_allowed {
            let key = SimpleKey { line: self.line, index: self.index, col: self.col };
            *self.keys.last_mut().expect("one per level") = Some(key);
        }
    }
    fn remove_simple_key(&mut self) {
        *self.keys.last_mut().expect("one per level") = None;
    }

    fn run(&mut self) -> Result<(), Stop> {
        loop {
            self.skip_to_token();
            if self.at_end(self.i) {
                return Ok(());
            }
            self.unroll_indent(self.col as isize);
            let c = self.byte(self.i);
            let blankz_after = self.is_blankz(self.i + 1);
            if self.col == 0 && c == b'%' {
                // A directive: to the end of the line.
                while !self.is_breakz(self.i) {
                    self.skip();
                }
                continue;
            }
            if self.document_marker() {
                self.unroll_indent(-1);
                self.remove_simple_key();
                self.simple_key_allowed = false;
                (0..3).for_each(|_| self.skip());
                continue;
            }
            match c {
                b'[' | b'{' => {
                    self.save_simple_key();
                    self.flow += 1;
                    self.keys.push(None);
                    self.too_deep()?;
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b']' | b'}' => {
                    self.remove_simple_key();
                    if self.flow > 0 {
                        self.flow -= 1;
                        self.keys.pop();
                    }
                    self.simple_key_allowed = false;
                    self.skip();
                }
                b',' => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'-' if blankz_after => {
                    if self.flow == 0 {
                        if !self.simple_key_allowed {
                            return Err(Stop::SyntaxError);
                        }
                        self.roll_indent(self.col)?;
                    }
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.skip();
                }
                b'?' if self.flow > 0 || blankz_after => {
                    if self.flow == 0 {
                        if !self.simple_key_allowed {
                            return Err(Stop::SyntaxError);
                        }
                        self.roll_indent(self.col)?;
                    }
                    self.remove_simple_key();
                    self.simple_key_allowed = self.flow == 0;
                    self.skip();
                }
                b':' if self.flow > 0 || blankz_after => {
                    self.value()?;
                    self.skip();
                }
                b'*' | b'&' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.skip();
                    while self.byte(self.i).is_ascii_alphanumeric() || matches!(self.byte(self.i), b'_' | b'-') {
                        self.skip();
                    }
                }
                b'!' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.skip();
                    // A tag ends at a blank, or in a flow collection at a `,`.
                    while !self.is_blankz(self.i) && (self.flow == 0 || self.byte(self.i) != b',') {
                        self.skip();
                    }
                }
                b'|' | b'>' if self.flow == 0 => {
                    self.remove_simple_key();
                    self.simple_key_allowed = true;
                    self.block_scalar()?;
                }
                b'\'' | b'"' => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.quoted_scalar(c)?;
                }
                _ if self.plain_start(c, blankz_after) => {
                    self.save_simple_key();
                    self.simple_key_allowed = false;
                    self.plain_scalar()?;
                }
                _ => return Err(Stop::SyntaxError),
            }
        }
    }

    /// Skips blanks, comments and line breaks before the next token.
    fn skip_to_token(&mut self) {
        loop {
            if self.col == 0 && self.b.get(self.i..).is_some_and(|rest| rest.starts_with("\u{feff}".as_bytes())) {
                self.skip();
            }
            while self.byte(self.i) == b' '
                || ((self.flow > 0 || !self.simple_key_allowed) && self.byte(self.i) == b'\t')
            {
                self.skip();
            }
            if self.byte(self.i) == b'#' {
                while !self.is_breakz(self.i) {
                    self.skip();
                }
            }
            if self.break_len(self.i) == 0 {
                return;
            }
            self.skip_break();
            if self.flow == 0 {
                self.simple_key_allowed = true;
            }
        }
    }

    /// `:` after a key: the key (if still possible: on this line and at
    /// most 1024 characters back) starts a block mapping at its column.
    fn value(&mut self) -> Result<(), Stop> {
        let key = self.keys.last().copied().flatten();
        if let Some(key) = key.filter(|k| k.line == self.line && k.index + 1024 >= self.index) {
            self.remove_simple_key();
            self.roll_indent(key.col)?;
            self.simple_key_allowed = false;
        } else {
            if self.flow == 0 {
                if !self.simple_key_allowed {
                    return Err(Stop::SyntaxError);
                }
                self.roll_indent(self.col)?;
            }
            self.simple_key_allowed = self.flow == 0;
        }
        Ok(())
    }

    /// Whether a plain scalar starts with `c` (libyaml's test).
    fn plain_start(&self, c: u8, blankz_after: bool) -> bool {
        let indicator = matches!(
            c,
            b'-' | b'?'
                | b':'
                | b','
                | b'['
                | b']'
                | b'{'
                | b'}'
                | b'#'
                | b'&'
                | b'*'
                | b'!'
                | b'|'
                | b'>'
                | b'\''
                | b'"'
                | b'%'
                | b'@'
                | b'`'
        );
        !(self.is_blankz(self.i) || indicator)
            || (c == b'-' && !self.is_blank(self.i + 1))
            || (self.flow == 0 && matches!(c, b'?' | b':') && !blankz_after)
    }

    /// A plain scalar, over several lines while they are indented more than
    /// the current block collection (any lines in a flow collection).
    fn plain_scalar(&mut self) -> Result<(), Stop> {
        let indent = self.indent + 1;
        let mut leading_blanks = false;
        loop {
            if self.document_marker() || self.byte(self.i) == b'#' {
                break;
            }
            while !self.is_blankz(self.i) {
                let c = self.byte(self.i);
                let next = self.byte(self.i + 1);
                if self.flow > 0 && c == b':' && matches!(next, b',' | b'?' | b'[' | b']' | b'{' | b'}') {
                    return Err(Stop::SyntaxError);
                }
                if (c == b':' && self.is_blankz(self.i + 1))
                    || (self.flow > 0 && matches!(c, b',' | b'[' | b']' | b'{' | b'}'))
                {
                    break;
                }
                leading_blanks = false;
                self.skip();
            }
            if !self.is_blank(self.i) && self.break_len(self.i) == 0 {
                break;
            }
            while self.is_blank(self.i) || self.break_len(self.i) > 0 {
                if self.is_blank(self.i) {
                    if leading_blanks && (self.col as isize) < indent && self.byte(self.i) == b'\t' {
                        return Err(Stop::SyntaxError);
                    }
                    self.skip();
                } else {
                    self.skip_break();
                    leading_blanks = true;
                }
            }
            if self.flow == 0 && (self.col as isize) < indent {
                break;
            }
        }
        if leading_blanks {
            self.simple_key_allowed = true;
        }
        Ok(())
    }

    /// A single- or double-quoted scalar, over any number of lines.
    fn quoted_scalar(&mut self, quote: u8) -> Result<(), Stop> {
        self.skip();
        loop {
            if self.at_end(self.i) || self.document_marker() {
                return Err(Stop::SyntaxError);
            }
            let c = self.byte(self.i);
            if c == quote && quote == b'\'' && self.byte(self.i + 1) == b'\'' {
                self.skip();
                self.skip();
            } else if c == quote {
                self.skip();
                return Ok(());
            } else if quote == b'"' && c == b'\\' {
                self.skip();
                if self.break_len(self.i) > 0 {
                    self.skip_break();
                } else if !self.at_end(self.i) {
                    self.skip();
                }
            } else if self.break_len(self.i) > 0 {
                self.skip_break();
            } else {
                self.skip();
            }
        }
    }

    /// A literal (`|`) or folded (`>`) scalar: its header, then every line
    /// indented as much as its first (or its indentation indicator says).
    fn block_scalar(&mut self) -> Result<(), Stop> {
        self.skip();
        // Chomping (`+`, `-`) and indentation (1-9) indicators, in either order.
        let mut increment = 0;
        let c = self.byte(self.i);
        if matches!(c, b'+' | b'-') {
            self.skip();
            match self.byte(self.i) {
                b'0' => return Err(Stop::SyntaxError),
                d @ b'1'..=b'9' => {
                    increment = isize::from(d - b'0');
                    self.skip();
                }
                _ => {}
            }
        } else if c == b'0' {
            return Err(Stop::SyntaxError);
        } else if c.is_ascii_digit() {
            increment = isize::from(c - b'0');
            self.skip();
            if matches!(self.byte(self.i), b'+' | b'-') {
                self.skip();
            }
        }
        while self.is_blank(self.i) {
            self.skip();
        }
        if self.byte(self.i) == b'#' {
            while !self.is_breakz(self.i) {
                self.skip();
            }
        }
        if !self.is_breakz(self.i) {
            return Err(Stop::SyntaxError);
        }
        if self.break_len(self.i) > 0 {
            self.skip_break();
        }
        let mut indent = match increment {
            0 => 0,
            n if self.indent >= 0 => self.indent + n,
            n => n,
        };
        self.block_scalar_breaks(&mut indent)?;
        while self.col as isize == indent && !self.at_end(self.i) {
            while !self.is_breakz(self.i) {
                self.skip();
            }
            if self.break_len(self.i) > 0 {
                self.skip_break();
            }
            self.block_scalar_breaks(&mut indent)?;
        }
        Ok(())
    }

    /// Empty lines and indentation in a block scalar; without an indicator,
    /// the first line with content sets the indentation.
    fn block_scalar_breaks(&mut self, indent: &mut isize) -> Result<(), Stop> {
        let mut max_indent = 0;
        loop {
            while (*indent == 0 || (self.col as isize) < *indent) && self.byte(self.i) == b' ' {
                self.skip();
            }
            max_indent = max_indent.max(self.col as isize);
            if (*indent == 0 || (self.col as isize) < *indent) && self.byte(self.i) == b'\t' {
                return Err(Stop::SyntaxError);
            }
            if self.break_len(self.i) == 0 {
                break;
            }
            self.skip_break();
        }
        if *indent == 0 {
            *indent = max_indent.max(self.indent + 1).max(1);
        }
        Ok(())
    }
}
