//! A small flag parser for the CLI: `--name value`, `--flag`, `-p 128`; no positional args.

use std::collections::BTreeMap;
use std::str::FromStr;

pub struct Args {
    values: BTreeMap<String, String>,
    flags: Vec<String>,
    used: std::cell::RefCell<Vec<String>>,
}

impl Args {
    /// `boolean` lists the flags that take no value.
    pub fn parse(argv: &[String], boolean: &[&str]) -> Result<Args, String> {
        let mut values = BTreeMap::new();
        let mut flags = Vec::new();
        let mut it = argv.iter();
        while let Some(a) = it.next() {
            let name = a
                .strip_prefix("--")
                .or_else(|| a.strip_prefix('-'))
                .ok_or_else(|| format!("unexpected argument '{a}' (options start with --)"))?;
            if boolean.contains(&name) {
                flags.push(name.to_string());
            } else {
                let v = it.next().ok_or_else(|| format!("option --{name} needs a value"))?;
                values.insert(name.to_string(), v.clone());
            }
        }
        Ok(Args { values, flags, used: Default::default() })
    }

    pub fn flag(&self, name: &str) -> bool {
        self.used.borrow_mut().push(name.to_string());
        self.flags.iter().any(|f| f == name)
    }

    pub fn str(&self, names: &[&str]) -> Option<String> {
        self.used.borrow_mut().extend(names.iter().map(|s| s.to_string()));
        names.iter().find_map(|n| self.values.get(*n).cloned())
    }

    pub fn required(&self, names: &[&str]) -> Result<String, String> {
        self.str(names).ok_or_else(|| format!("missing --{}", names[0]))
    }

    pub fn get<T: FromStr>(&self, names: &[&str], default: T) -> Result<T, String> {
        match self.str(names) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{}: cannot parse '{v}'", names[0])),
        }
    }

    /// Fails on options nobody asked for (typos), after all lookups.
    pub fn finish(&self) -> Result<(), String> {
        let used = self.used.borrow();
        for k in self.values.keys().chain(self.flags.iter()) {
            if !used.contains(k) {
                return Err(format!("unknown option --{k}"));
            }
        }
        Ok(())
    }
}
