//! What the decision scripts are told about a call: each limit's spec (its algorithm, shadow
//! mode and arguments) and the call that carries them with its keys to a node, alone or in a
//! batch. The one owner of how a spec is written for `multi.lua` and `batch.lua`; the calls
//! keep their specs typed until they are written into a command.

use redis::{RedisWrite, ToRedisArgs};

use crate::algorithm::library::Lua;
use crate::algorithm::{ScriptArgs, StateKind};
use crate::pipeline::check::Check;

use ratelimit_vocab::native;

// Every kind's id has a spec id in shadow mode too (`native::spec_id`).
const _: () = {
    let mut i = 0;
    while i < StateKind::ALL.len() {
        assert!(native::spec_id(StateKind::ALL[i].id(), true).is_some());
        i += 1;
    }
};

/// One limit of a call as the decision scripts take it: its algorithm's script, whether it is
/// in shadow mode, and its script's arguments for the call's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Spec {
    kind: StateKind,
    shadow: bool,
    args: ScriptArgs,
}

impl Spec {
    /// The spec of `check`.
    pub(super) fn of(check: &Check<'_>) -> Spec {
        let kernel = check.kernel();
        Spec {
            kind: kernel.kind(),
            shadow: check.limit.is_shadow(),
            args: kernel.script_args(u64::from(check.cost)),
        }
    }

    /// The spec of every limit of a call, in order.
    pub(super) fn all(checks: &[Check<'_>]) -> Vec<Spec> {
        checks.iter().map(Spec::of).collect()
    }

    /// The script that decides this limit alone.
    pub(super) fn alone(&self) -> Lua {
        Lua::Alone(self.kind)
    }

    /// The arguments of [`alone`](Spec::alone)'s script.
    pub(super) fn args(&self) -> &[u64] {
        self.args.as_slice()
    }
}

/// A spec as `multi.lua` and `batch.lua` read it: the kind's id (plus
/// [`native::SHADOW_BIT`] in shadow mode), the number of its arguments, and them.
impl ToRedisArgs for Spec {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        // Every kind has one (checked above, when this compiles).
        let id = native::spec_id(self.kind.id(), self.shadow).unwrap_or(0);
        u64::from(id).write_redis_args(out);
        (self.args().len() as u64).write_redis_args(out);
        for arg in self.args() {
            arg.write_redis_args(out);
        }
    }

    fn num_of_args(&self) -> usize {
        2 + self.args().len()
    }
}

/// One call's part of a script: its keys and, per limit, its spec.
#[derive(Clone, Copy)]
pub(super) struct Call<'a> {
    pub(super) keys: &'a [&'a str],
    pub(super) specs: &'a [Spec],
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Kernel;
    use crate::limit::Limit;

    #[test]
    fn a_spec_is_written_as_the_scripts_read_it() {
        let limit = Limit::per_second(10).burst(20);
        let args = Kernel::of(&limit).script_args(3);
        let id = u64::from(Kernel::of(&limit).kind().id());
        let written = |limit: &Limit| -> Vec<u64> {
            Spec::of(&Check::new("k", limit, 3))
                .to_redis_args()
                .iter()
                .map(|arg| std::str::from_utf8(arg).unwrap().parse().unwrap())
                .collect()
        };
        let mut expected = vec![id, args.as_slice().len() as u64];
        expected.extend_from_slice(args.as_slice());
        assert_eq!(written(&limit), expected);
        // Shadow mode adds the shadow bit to the kind; the script alone takes the arguments
        // only.
        expected[0] += u64::from(native::SHADOW_BIT);
        assert_eq!(written(&limit.shadow()), expected);
        let shadowed = limit.shadow();
        let spec = Spec::of(&Check::new("k", &shadowed, 3));
        assert_eq!(spec.alone(), Lua::Alone(Kernel::of(&limit).kind()));
        assert_eq!(spec.args(), args.as_slice());
        assert_eq!(spec.num_of_args(), expected.len());
    }
}
