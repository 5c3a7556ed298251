//! One module per subcommand of the binary (`shop serve`, `seed`, `rows`,
//! `migrate`, `sale`, `users`, `items`, `load`; `shop work` lives with the daemons it runs).

pub mod items;
pub mod load;
pub mod migrate;
pub mod rows;
pub mod sale;
pub mod seed;
pub mod serve;
pub mod users;
