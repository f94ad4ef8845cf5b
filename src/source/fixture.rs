//! The optional first document of a fixture (`kind: SvcproxyFixture`): the node and the
//! options the CLI would otherwise take from flags. See `fixtures/README.md`. It is a
//! settings layer, so its types live in [`crate::settings::fixture`]; the file reader finds
//! it among the objects.

pub use crate::settings::fixture::{FixtureDoc, FixtureNode, FixtureOptions, FIXTURE_KIND};
