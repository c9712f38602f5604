//! A list that is almost always of one item: a request's alternatives, a selector list's
//! programs, the search's data per request. The one item is kept inline, so the common claim
//! costs no allocation for it.

use std::ops::{Deref, DerefMut};

/// None, one inline, or more in a `Vec`; read as a slice.
#[derive(Debug, Clone, Default)]
pub(crate) enum OneOrMany<T> {
    #[default]
    Empty,
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub fn push(&mut self, item: T) {
        *self = match std::mem::take(self) {
            OneOrMany::Empty => OneOrMany::One(item),
            OneOrMany::One(first) => OneOrMany::Many(vec![first, item]),
            OneOrMany::Many(mut v) => {
                v.push(item);
                OneOrMany::Many(v)
            }
        };
    }
}

impl<T> Deref for OneOrMany<T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            OneOrMany::Empty => &[],
            OneOrMany::One(x) => std::slice::from_ref(x),
            OneOrMany::Many(v) => v,
        }
    }
}

impl<T> DerefMut for OneOrMany<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            OneOrMany::Empty => &mut [],
            OneOrMany::One(x) => std::slice::from_mut(x),
            OneOrMany::Many(v) => v,
        }
    }
}

impl<'s, T> IntoIterator for &'s OneOrMany<T> {
    type Item = &'s T;
    type IntoIter = std::slice::Iter<'s, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T> FromIterator<T> for OneOrMany<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut out = OneOrMany::Empty;
        for x in iter {
            out.push(x);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::OneOrMany;

    #[test]
    fn reads_as_the_slice_of_what_was_pushed() {
        for n in 0..6 {
            let few: OneOrMany<usize> = (0..n).collect();
            assert_eq!(&*few, (0..n).collect::<Vec<_>>().as_slice(), "{n} items");
            assert_eq!(matches!(few, OneOrMany::One(_)), n == 1, "{n} items");
        }
        let mut few: OneOrMany<usize> = (0..3).collect();
        few[1] = 7;
        assert_eq!(&*few, &[0, 7, 2]);
    }
}
