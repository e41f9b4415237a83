//! The one judgement of the declarations as a whole, which no declaration can make alone: a
//! limit name declared more than once (duplicated), and a `shared = ".."` use of a name that
//! nobody declares (dangling). `enable_redis_rate_limit!` and
//! [`validate_declared_limits`](super::validate_declared_limits) report it as an error, and a
//! call of such a declaration is refused by it ([`LimitDeclaration::refusal`]), whatever
//! limiter decides the call.

use std::collections::HashMap;
use std::fmt;
use std::sync::LazyLock;

use super::{LimitDeclaration, declared_in_source, describe_names};
use crate::errors::Error;

/// What is wrong with one declaration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A `shared = ".."` use of a name that no declaration declares: it has no limit.
    Dangling,
    /// Its name is declared more than once (of a `shared` use: the name it draws from), so
    /// the declarations would take from one another's buckets.
    Duplicated,
}

/// The declarations of a program, judged once.
#[derive(Debug)]
pub(crate) struct Validation {
    /// Every declaration judged, sorted as [`declared_limits`](super::declared_limits) sorts them.
    all: Vec<&'static LimitDeclaration>,
    /// The declarations that declare a limit (not `shared` uses), by name.
    declaring: HashMap<&'static str, Vec<&'static LimitDeclaration>>,
    /// What the error of [`Validation::result`] says, when something is wrong.
    error: Option<String>,
}

/// The declarations the macros registered, judged on first use: they are fixed before `main`
/// runs. A layer's limit built at run time is judged when it is built ([`super::runtime`]),
/// and is never dangling nor duplicated: it is valid here (no declaration of the source has
/// its name).
static PROGRAM: LazyLock<Validation> = LazyLock::new(|| Validation::of(declared_in_source()));

/// The judgement of the declarations this program registered.
pub(crate) fn program() -> &'static Validation {
    &PROGRAM
}

impl Validation {
    /// Judges `all`, sorted as [`declared_limits`](super::declared_limits) sorts them.
    pub(crate) fn of(all: Vec<&'static LimitDeclaration>) -> Validation {
        let mut declaring: HashMap<&'static str, Vec<&'static LimitDeclaration>> = HashMap::new();
        for decl in all.iter().filter(|d| !d.is_shared_use()) {
            declaring.entry(decl.name()).or_default().push(decl);
        }
        let mut validation = Validation {
            all,
            declaring,
            error: None,
        };
        validation.error = validation.message();
        validation
    }

    /// What is wrong with `decl`, if anything. This is the one place that decides it: the
    /// error of [`Validation::result`] lists the declarations it finds wrong.
    pub(crate) fn problem(&self, decl: &LimitDeclaration) -> Option<Problem> {
        match self.declaring.get(decl.name()).map_or(0, Vec::len) {
            0 if decl.is_shared_use() => Some(Problem::Dangling),
            0 | 1 => None,
            _ => Some(Problem::Duplicated),
        }
    }

    /// `Ok` when no declaration is wrong; else [`Error::Config`] naming every wrong name with
    /// the place of each declaration involved.
    pub(crate) fn result(&self) -> Result<(), Error> {
        match &self.error {
            None => Ok(()),
            Some(message) => Err(Error::Config(message.clone())),
        }
    }

    /// What is wrong with the limit `name`, and how to fix it: one sentence, the places of
    /// every declaration involved in it.
    pub(crate) fn describe(&self, name: &'static str, problem: Problem) -> Described<'_> {
        Described {
            validation: self,
            name,
            problem,
        }
    }

    /// The error's message: one sentence per wrong name, in the order of the names.
    fn message(&self) -> Option<String> {
        let mut sentences = Vec::new();
        let mut last = None;
        for decl in &self.all {
            if last == Some(decl.name()) {
                continue;
            }
            last = Some(decl.name());
            if let Some(problem) = self.problem(decl) {
                sentences.push(self.describe(decl.name(), problem).to_string());
            }
        }
        match sentences.as_slice() {
            [] => None,
            [one] => Some(one.clone()),
            many => Some(format!(
                "{} mistakes in the declared limits:\n- {}",
                many.len(),
                many.join("\n- ")
            )),
        }
    }

    /// The declarations named `name` that are `shared` uses of it.
    fn uses(&self, name: &'static str) -> impl Iterator<Item = &'static LimitDeclaration> + '_ {
        self.all
            .iter()
            .copied()
            .filter(move |d| d.is_shared_use() && d.name() == name)
    }
}

/// [`Validation::describe`]'s sentence, written when it is shown.
#[derive(Debug)]
pub(crate) struct Described<'a> {
    validation: &'a Validation,
    name: &'static str,
    problem: Problem,
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, v) = (self.name, self.validation);
        match self.problem {
            Problem::Dangling => {
                let mut names: Vec<&'static str> = v.declaring.keys().copied().collect();
                names.sort_unstable();
                let firsts: Vec<&'static LimitDeclaration> = names
                    .iter()
                    .filter_map(|n| v.declaring.get(n)?.first().copied())
                    .collect();
                write!(
                    f,
                    "`shared = \"{name}\"` ({}) names no declared limit; declare it once with \
                     `name = \"{name}\"` and its rate; declared limits: {}",
                    Places(&v.uses(name).collect::<Vec<_>>()),
                    describe_names(&firsts)
                )
            }
            Problem::Duplicated => {
                let declaring = v.declaring.get(name).map_or(&[][..], Vec::as_slice);
                write!(
                    f,
                    "the limit `{name}` is declared {} times ({}); give all but one of them \
                     another `name = \"..\"`, or make the others `shared = \"{name}\"` to draw \
                     from the same buckets",
                    declaring.len(),
                    Places(declaring)
                )?;
                let uses: Vec<_> = v.uses(name).collect();
                if !uses.is_empty() {
                    write!(
                        f,
                        " (its `shared` uses, refused with it: {})",
                        Places(&uses)
                    )?;
                }
                Ok(())
            }
        }
    }
}

/// `a.rs:3`, `a.rs:3 and b.rs:9`, `a.rs:3, b.rs:9 and c.rs:1`.
pub(super) struct Places<'a>(pub(super) &'a [&'static LimitDeclaration]);

impl fmt::Display for Places<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, decl) in self.0.iter().enumerate() {
            match i {
                0 => {}
                i if i + 1 == self.0.len() => f.write_str(" and ")?,
                _ => f.write_str(", ")?,
            }
            write!(f, "{}:{}", decl.file(), decl.line())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{Problem, Validation};
    use crate::limit::Limit;
    use crate::registry::LimitDeclaration;

    fn declared(name: &'static str, line: u32) -> &'static LimitDeclaration {
        Box::leak(Box::new(LimitDeclaration::new(
            name,
            Limit::per_minute(3),
            1,
            "Global",
            "src/a.rs",
            line,
        )))
    }

    fn shared(name: &'static str, line: u32) -> &'static LimitDeclaration {
        Box::leak(Box::new(LimitDeclaration::sharing(
            name, 1, "Global", "src/b.rs", line,
        )))
    }

    /// Each declaration's problem, and one error that names every wrong name with the place
    /// of each declaration involved.
    #[test]
    fn every_dangling_and_duplicated_name_is_found_and_reported_with_its_places() {
        let (ok, ok_use) = (declared("ok", 1), shared("ok", 2));
        let (twice_a, twice_b, twice_use) = (
            declared("twice", 3),
            declared("twice", 4),
            shared("twice", 5),
        );
        let (nobody_a, nobody_b) = (shared("nobody", 6), shared("nobody", 7));
        let all = vec![nobody_a, nobody_b, ok, ok_use, twice_a, twice_b, twice_use];
        let v = Validation::of(all);
        for (decl, problem) in [
            (ok, None),
            (ok_use, None),
            (twice_a, Some(Problem::Duplicated)),
            (twice_b, Some(Problem::Duplicated)),
            (twice_use, Some(Problem::Duplicated)),
            (nobody_a, Some(Problem::Dangling)),
            (nobody_b, Some(Problem::Dangling)),
        ] {
            assert_eq!(v.problem(decl), problem, "{decl:?}");
        }
        let Err(crate::errors::Error::Config(message)) = v.result() else {
            panic!("no error: {:?}", v.result());
        };
        assert_eq!(
            message,
            "2 mistakes in the declared limits:\n\
             - `shared = \"nobody\"` (src/b.rs:6 and src/b.rs:7) names no declared limit; \
             declare it once with `name = \"nobody\"` and its rate; declared limits: ok, twice\n\
             - the limit `twice` is declared 2 times (src/a.rs:3 and src/a.rs:4); give all but \
             one of them another `name = \"..\"`, or make the others `shared = \"twice\"` to \
             draw from the same buckets (its `shared` uses, refused with it: src/b.rs:5)"
        );
    }

    /// Valid declarations, and one mistake alone, said in one sentence.
    #[test]
    fn valid_declarations_pass_and_one_mistake_is_one_sentence() {
        let v = Validation::of(vec![declared("a", 1), shared("a", 2), declared("b", 3)]);
        assert!(v.result().is_ok());
        let v = Validation::of(vec![declared("a", 1), shared("c", 2)]);
        let message = v.result().unwrap_err().to_string();
        assert!(
            message.starts_with("`shared = \"c\"` (src/b.rs:2) names"),
            "{message}"
        );
        assert!(message.ends_with("declared limits: a"), "{message}");
    }
}
