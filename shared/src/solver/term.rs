//! What every spec provides to the search: its components' values and how a move changes them.

use super::state::State;
use super::{ContainerId, ObjectId};

/// Values at or below this count as zero, so sums of fractional values do not flicker.
pub const EPS: f64 = 1e-9;

/// A component's expression before and after a move. A constraint component holds while its
/// expression is `<= 0`; a goal component costs `max(0, expression)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Effect {
    pub component: usize,
    pub before: f64,
    pub after: f64,
}

/// A spec turned into something the search can evaluate.
pub trait Term {
    /// How reasons and errors name the spec, e.g. `capacity(gpu)`.
    fn label(&self) -> String;
    /// The expression of every component in the current state.
    fn components(&self, state: &State) -> Vec<f64>;
    /// The components moving `object` to `to` changes, with their expressions before and after.
    /// Only called when `to` differs from the object's container.
    fn effects(&self, state: &State, object: ObjectId, to: ContainerId, out: &mut Vec<Effect>);
    /// Objects whose move could lower this component's expression.
    fn hot_objects(&self, state: &State, component: usize, out: &mut Vec<ObjectId>);
    /// Containers to try for an object besides the best-fitting ones (a preferred container,
    /// the object's own origin).
    fn special_targets(&self, _state: &State, _object: ObjectId, _out: &mut Vec<ContainerId>) {}
    /// A move forbidden whatever it does to the values (ToFree keeps objects out as a constraint).
    fn forbids(&self, _state: &State, _object: ObjectId, _to: ContainerId) -> bool {
        false
    }
    /// Components (as `hot_objects` numbers them) whose full evacuation could lower the
    /// expression when no single move does.
    fn evacuations(&self, _state: &State, _out: &mut Vec<usize>) {}
    /// Whether an object this term keeps hot at the end is reported as unmovable.
    fn reports_unmovable(&self) -> bool {
        true
    }
}
