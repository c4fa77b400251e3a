//! VM testbed
