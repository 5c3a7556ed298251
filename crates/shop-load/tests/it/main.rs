//! The load generator's tests against real sockets.

mod target_down;
