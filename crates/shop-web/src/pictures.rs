//! Product pictures with no file from outside: an SVG the shop draws from an
//! item's department and id (a department's glyph on colours picked by its id).
//!
//! The picture is a pure function of its URL (`/pictures/v1/<department>/<id>.svg`)
//! and never changes, so it is served `Cache-Control: public, max-age=31536000,
//! immutable`. A change of department changes the URL; a change of the drawing
//! changes [`DRAWING`]. Only an item's own picture URL is drawn (the item read
//! from the process's copy of the catalogue, [`crate::purged_copy`]): a made-up
//! URL (or another spelling of a picture's own) is a 404, so a client cannot
//! fill an edge cache with pictures of nothing. Nothing of the URL is written into the
//! picture (the department is only hashed).

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use shop_cache::domain::ItemId;

use crate::AppState;
use crate::assets::fnv1a as fnv;
use crate::error::WebError;
use crate::templates::url_encode;

/// The drawing's version, in every picture URL: bumped when the drawing changes.
pub const DRAWING: &str = "v1";

/// The size pages show a picture at on the item page, in CSS pixels (cards and
/// cart lines show it smaller; the picture is a vector).
pub const SIZE: u32 = 320;

/// How pictures are cached: a year, never revalidated (the URL changes instead).
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The picture routes. (Not under the per-address budget of uncached work: a
/// listing page asks for 24 pictures at once. A made-up id costs one primary-key
/// read.)
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/pictures/{drawing}/{department}/{file}", get(picture))
        .with_state(state)
}

/// The URL of the picture of item `id` of `department`.
pub fn url(department: &str, id: u64) -> String {
    path(&url_encode(department), id)
}

/// A picture's path with its department's segment spelled `department`.
fn path(department: &str, id: u64) -> String {
    format!("/pictures/{DRAWING}/{department}/{id}.svg")
}

async fn picture(
    State(state): State<AppState>,
    Path((drawing, department, file)): Path<(String, String, String)>,
    uri: Uri,
) -> Result<Response, WebError> {
    let none = || WebError::not_found("there is no such picture");
    let id = file
        .strip_suffix(".svg")
        .and_then(|id| id.parse::<ItemId>().ok())
        .filter(|_| drawing == DRAWING)
        .ok_or_else(none)?;
    let items = crate::purged_copy::items(&state.db, state.item_copies.as_deref(), &[id]).await?;
    // As sent, not as decoded: a picture has its URL, and the one other
    // spelling of a path a proxy may pass on (`url_encode_plain`), so an edge
    // cache keeps at most two copies of it (`/pictures/v1/%6Bitchen/5.svg` is
    // no picture's).
    let own = url(&department, id.get());
    let plain = path(&crate::templates::url_encode_plain(&department), id.get());
    if items.first().map(|item| item.picture.as_str()) != Some(&own)
        || (uri.path() != own && uri.path() != plain)
    {
        return Err(none());
    }
    let id = id.get();
    Ok((
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, IMMUTABLE),
        ],
        draw(&department, id),
    )
        .into_response())
}

/// The glyph of a department (the demo catalogue's; any other gets a parcel),
/// as SVG path data on a 100x100 grid centred at 50,50.
fn glyph(department: &str) -> &'static str {
    match department {
        // A mug.
        "kitchen" => {
            "M30 35h34v30a10 10 0 0 1-10 10H40a10 10 0 0 1-10-10zM64 42h6a8 8 0 0 1 0 16h-6"
        }
        // A tent.
        "outdoor" => "M50 25L22 75h56zM50 25v50M42 75l8-18 8 18",
        // Headphones.
        "audio" => "M28 62V52a22 22 0 0 1 44 0v10M24 60h10v16H24zM66 60h10v16H66z",
        // A pencil.
        "office" => "M30 70l4-14 30-30 10 10-30 30zM34 56l10 10M58 32l10 10",
        // A shirt.
        "clothing" => "M38 26l-16 10 6 12 8-4v30h28V44l8 4 6-12-16-10a12 12 0 0 1-24 0z",
        // A wrench.
        "tools" => "M66 24a14 14 0 0 0-16 18L26 66l8 8 24-24a14 14 0 0 0 18-16l-8 8-8-2-2-8z",
        // A house.
        "home" => "M24 50l26-24 26 24M32 44v30h36V44M44 74V58h12v16",
        // A screen.
        "electronics" => "M24 30h52v34H24zM40 74h20M50 64v10",
        // A parcel.
        _ => "M26 38l24-12 24 12v26L50 76 26 64zM26 38l24 12 24-12M50 50v26",
    }
}

/// The picture of item `id` of `department`.
pub fn draw(department: &str, id: u64) -> String {
    let hue = fnv(department.as_bytes()) % 360;
    let shade = fnv(&id.to_le_bytes());
    // The item's own tint of its department's colour, and a spot placed by id.
    let hue2 = (hue + 20 + shade % 40) % 360;
    let light = 86 + shade % 8;
    let (cx, cy, r) = (
        20 + shade % 60,
        20 + (shade >> 8) % 60,
        10 + (shade >> 16) % 14,
    );
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 100 100\" width=\"{SIZE}\" height=\"{SIZE}\">\
<defs><linearGradient id=\"g\" x1=\"0\" y1=\"0\" x2=\"1\" y2=\"1\">\
<stop offset=\"0\" stop-color=\"hsl({hue},70%,{light}%)\"/>\
<stop offset=\"1\" stop-color=\"hsl({hue2},60%,{dark}%)\"/></linearGradient></defs>\
<rect width=\"100\" height=\"100\" fill=\"url(#g)\"/>\
<circle cx=\"{cx}\" cy=\"{cy}\" r=\"{r}\" fill=\"#fff\" opacity=\".35\"/>\
<path d=\"{glyph}\" fill=\"none\" stroke=\"hsl({hue},55%,28%)\" stroke-width=\"4\" \
stroke-linecap=\"round\" stroke-linejoin=\"round\"/></svg>",
        dark = light - 16,
        glyph = glyph(department),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_picture_depends_on_its_department_and_id_only() {
        assert_eq!(draw("kitchen", 7), draw("kitchen", 7));
        assert_ne!(draw("kitchen", 7), draw("kitchen", 8));
        assert_ne!(draw("kitchen", 7), draw("audio", 7));
        assert!(draw("kitchen", 7).starts_with("<svg xmlns="));
    }

    #[test]
    fn nothing_of_the_url_is_written_into_the_picture() {
        let svg = draw("<script>alert(1)</script>", 1);
        assert!(!svg.contains("script"), "{svg}");
    }

    #[test]
    fn urls_are_versioned_and_encode_the_department() {
        assert_eq!(url("kitchen", 42), "/pictures/v1/kitchen/42.svg");
        assert_eq!(
            url("home & garden", 3),
            "/pictures/v1/home%20%26%20garden/3.svg"
        );
    }
}
