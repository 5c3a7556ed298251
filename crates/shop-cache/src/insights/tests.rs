//! The insights' rules, without Redis.

use super::*;

fn seen(viewers: u64, buyers: u64) -> ItemInsights {
    ItemInsights {
        viewers,
        buyers,
        also_bought: Vec::new(),
    }
}

#[test]
fn the_figure_comes_with_its_evidence_and_only_past_the_minimum() {
    assert_eq!(seen(0, 0).viewed_then_bought(50), None);
    assert_eq!(seen(49, 3).viewed_then_bought(50), None);
    assert_eq!(
        seen(340, 41).viewed_then_bought(50).as_deref(),
        Some("12% of 340 shoppers who viewed this item in the last two weeks bought it.")
    );
    assert_eq!(
        seen(12_345, 12_345).viewed_then_bought(50).as_deref(),
        Some("100% of 12,345 shoppers who viewed this item in the last two weeks bought it.")
    );
    assert_eq!(
        seen(1, 0).viewed_then_bought(0).as_deref().map(|t| &t[..2]),
        Some("0%")
    );
}

fn candidate(n: u64, co_buyers: f64, bought: Option<f64>) -> Candidate {
    Candidate {
        item: ItemId::new(n).unwrap(),
        co_buyers,
        bought,
    }
}

#[test]
fn pairs_are_ranked_by_how_far_they_beat_popularity() {
    // An item in 20 of 100 orders.
    let ranked = rank_also_bought(
        20.0,
        100.0,
        &[
            candidate(2, 12.0, Some(60.0)), // expected 12: chance
            candidate(3, 8.0, Some(9.0)),   // expected 1.8
            candidate(4, 5.0, Some(5.0)),   // expected 1
            candidate(5, 2.0, Some(2.0)),   // too few orders
            candidate(6, 9.0, None),        // popularity unknown
            candidate(7, 5.0, Some(5.0)),   // ties with 4
            candidate(8, 9.0, Some(2.0)),   // more together than it sold: 2
        ],
        3.0,
    );
    let order: Vec<u64> = ranked.iter().map(|a| a.item.get()).collect();
    // 3: (8 - 1.8) / sqrt(1.8) = 4.62; 4 and 7: (5 - 1) / 1 = 4.
    assert_eq!(order, vec![3, 4, 7]);
    assert_eq!((ranked[1].score, ranked[1].expected), (4.0, 1.0));
    // Decayed counts round to the nearest order.
    assert!(enough(2.5, 3.0) && !enough(2.49, 3.0));
}

#[test]
fn at_most_the_offered_are_ranked() {
    let many: Vec<Candidate> = (2..40).map(|n| candidate(n, 10.0, Some(10.0))).collect();
    let ranked = rank_also_bought(10.0, 1_000.0, &many, 3.0);
    assert_eq!(ranked.len(), ALSO_BOUGHT_OFFERED);
    assert_eq!(ranked[0].item.get(), 2);
}

#[test]
fn an_order_weighs_twice_as_much_a_half_life_later() {
    let t = LANDMARK + 1_000_000.0;
    let ratio = weight_at(t + HALF_LIFE.as_secs_f64()) / weight_at(t);
    assert!((ratio - 2.0).abs() < 1e-12);
    assert_eq!(weight_at(LANDMARK), 1.0);
    // Still finite in 39 years.
    assert!(weight_at(LANDMARK + 39.0 * 365.25 * 86_400.0).is_finite());
}

#[test]
fn thousands_are_separated() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1_000), "1,000");
    assert_eq!(thousands(1_234_567), "1,234,567");
}
