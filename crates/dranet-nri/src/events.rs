//! The lifecycle events a plugin can subscribe to.

use std::fmt;

/// A pod or container lifecycle event, numbered as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Event {
    /// A pod sandbox was created and its network set up; its namespaces exist.
    RunPodSandbox = 1,
    /// A pod sandbox is being stopped.
    StopPodSandbox = 2,
    /// A pod sandbox was removed.
    RemovePodSandbox = 3,
    /// A container is about to be created; the plugin may adjust it.
    CreateContainer = 4,
    /// A container was created.
    PostCreateContainer = 5,
    /// A container is about to start.
    StartContainer = 6,
    /// A container started.
    PostStartContainer = 7,
    /// A container's resources are about to be updated.
    UpdateContainer = 8,
    /// A container's resources were updated.
    PostUpdateContainer = 9,
    /// A container is being stopped.
    StopContainer = 10,
    /// A container was removed.
    RemoveContainer = 11,
    /// A pod's resources are about to be updated (NRI ≥ v0.10 runtimes only).
    UpdatePodSandbox = 12,
    /// A pod's resources were updated (NRI ≥ v0.10 runtimes only).
    PostUpdatePodSandbox = 13,
    /// Validation of the merged container adjustment (NRI ≥ v0.10 runtimes only).
    ValidateContainerAdjustment = 14,
}

impl Event {
    /// Every event, in wire order.
    pub const ALL: [Event; 14] = [
        Event::RunPodSandbox,
        Event::StopPodSandbox,
        Event::RemovePodSandbox,
        Event::CreateContainer,
        Event::PostCreateContainer,
        Event::StartContainer,
        Event::PostStartContainer,
        Event::UpdateContainer,
        Event::PostUpdateContainer,
        Event::StopContainer,
        Event::RemoveContainer,
        Event::UpdatePodSandbox,
        Event::PostUpdatePodSandbox,
        Event::ValidateContainerAdjustment,
    ];

    /// The event with this wire number, if any.
    pub fn from_wire(n: i32) -> Option<Event> {
        Event::ALL.iter().copied().find(|e| *e as i32 == n)
    }

    /// The event's method-style name, e.g. `RunPodSandbox`.
    pub fn name(self) -> &'static str {
        match self {
            Event::RunPodSandbox => "RunPodSandbox",
            Event::StopPodSandbox => "StopPodSandbox",
            Event::RemovePodSandbox => "RemovePodSandbox",
            Event::CreateContainer => "CreateContainer",
            Event::PostCreateContainer => "PostCreateContainer",
            Event::StartContainer => "StartContainer",
            Event::PostStartContainer => "PostStartContainer",
            Event::UpdateContainer => "UpdateContainer",
            Event::PostUpdateContainer => "PostUpdateContainer",
            Event::StopContainer => "StopContainer",
            Event::RemoveContainer => "RemoveContainer",
            Event::UpdatePodSandbox => "UpdatePodSandbox",
            Event::PostUpdatePodSandbox => "PostUpdatePodSandbox",
            Event::ValidateContainerAdjustment => "ValidateContainerAdjustment",
        }
    }

    fn bit(self) -> u32 {
        1 << (self as u32 - 1)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The set of events a plugin subscribes to, sent to the runtime in answer to `Configure`.
///
/// The empty mask is special on the wire: the runtime reads it as "every event I know". Runtimes
/// older than NRI v0.10 (containerd 1.7) reject masks containing [`Event::UpdatePodSandbox`],
/// [`Event::PostUpdatePodSandbox`] or [`Event::ValidateContainerAdjustment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventMask(u32);

impl EventMask {
    /// No events (sent as 0, which the runtime reads as all events it knows).
    pub const fn empty() -> Self {
        EventMask(0)
    }

    /// The mask with these wire bits; bits of events this crate does not know are dropped.
    pub fn from_bits(bits: u32) -> Self {
        EventMask(bits & ((1 << Event::ALL.len()) - 1))
    }

    /// The mask of these events.
    pub fn of(events: &[Event]) -> Self {
        events.iter().fold(Self::empty(), |m, e| m.with(*e))
    }

    /// This mask plus `event`.
    #[must_use]
    pub fn with(self, event: Event) -> Self {
        EventMask(self.0 | event.bit())
    }

    /// Whether `event` is in the mask.
    pub fn contains(self, event: Event) -> bool {
        self.0 & event.bit() != 0
    }

    /// Whether no event is in the mask.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The wire value.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The events in the mask, in wire order.
    pub fn iter(self) -> impl Iterator<Item = Event> {
        Event::ALL.into_iter().filter(move |e| self.contains(*e))
    }
}

impl FromIterator<Event> for EventMask {
    fn from_iter<I: IntoIterator<Item = Event>>(iter: I) -> Self {
        iter.into_iter().fold(Self::empty(), |m, e| m.with(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_match_the_wire_numbering() {
        assert_eq!(EventMask::of(&[Event::RunPodSandbox]).bits(), 1);
        assert_eq!(EventMask::of(&[Event::CreateContainer]).bits(), 1 << 3);
        assert_eq!(EventMask::of(&[Event::RemoveContainer]).bits(), 1 << 10);
        let all: EventMask = Event::ALL.into_iter().collect();
        assert_eq!(all.bits(), (1 << 14) - 1);
        assert_eq!(all.iter().count(), 14);
        assert_eq!(Event::from_wire(4), Some(Event::CreateContainer));
        assert_eq!(Event::from_wire(15), None);
        assert_eq!(Event::from_wire(0), None);
    }
}
