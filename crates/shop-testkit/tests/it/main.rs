//! Integration tests of the test fixtures themselves, against real servers.

mod cluster;
