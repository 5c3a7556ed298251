//! The `[edge]` section: the edge caches in front of the shop (Varnish with
//! `deploy/varnish/shop.vcl`, a CDN), which every purge also reaches.

use clap::Args;
use serde::Deserialize;
use shop_page_cache::EdgePurger;

/// The edge caches in front of the shop (`[edge]`): what a purge reaches.
#[derive(Debug, Clone, Args, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EdgeSettings {
    /// An edge cache's purge address (Varnish with deploy/varnish/shop.vcl):
    /// every purge also sends `PURGE` with `xkey-purge: <tags>` there before it
    /// returns. Repeat it for several edges [default: none].
    #[arg(long = "edge-purge-url", global = true, env = "SHOP_EDGE_PURGE_URLS", value_delimiter = ',',
          value_parser = parse_edge_url)]
    pub edge_purge_url: Vec<String>,
}

impl Default for EdgeSettings {
    fn default() -> Self {
        super::settings::compiled_defaults()
    }
}

impl EdgeSettings {
    /// The purger for these edges, if any.
    pub fn purger(&self) -> Option<EdgePurger> {
        let urls: Vec<_> = self
            .edge_purge_url
            .iter()
            .filter_map(|url| EdgePurger::parse_url(url).ok())
            .collect();
        (!urls.is_empty()).then(|| EdgePurger::new(urls))
    }
}

fn parse_edge_url(s: &str) -> Result<String, String> {
    EdgePurger::parse_url(s).map(|_| s.trim().to_owned())
}
