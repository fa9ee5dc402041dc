//! The mathematics of ZabCT's adaptive coin ([T] Ch. 4; zab.md §5).
//!
//! * [`w`]: W(p), the expected number of later abcasts the leader needs before it can deliver a
//!   proposal when each of the n followers broadcasts its (cumulative) ack with probability p.
//!   Computed with the general recursion of Eq 4.8/4.9, **not** the closed forms of App. C,
//!   whose N = 9 form is misprinted (erratum 6).
//! * [`p2`]: P₂, the largest p that keeps the follower ack rate under θ (Eq 4.2).
//! * [`p1_estimate`]: Algorithm 1 over the grid of R probabilities, with erratum 7 handled: an
//!   infeasible case (including case (iii), where the printed algorithm returns P₂ + δ) is
//!   reported as `None` = switch to Zab, and every result is re-checked against Eq 4.1 and 4.2.
//! * [`choose_p`]: the thesis's static policies ZabCT_u (p = P₂), ZabCT_a and ZabCT_aa.

/// C(n, k) as a float (n ≤ 64 here).
fn choose(n: u32, k: u32) -> f64 {
    if k > n {
        return 0.0;
    }
    let k = k.min(n - k);
    (0..k).fold(1.0, |acc, i| acc * (n - i) as f64 / (i + 1) as f64)
}

/// q_ij: from state S_i (i followers have acked m or something later), the probability of state
/// S_j after one more abcast: C(n−i, j−i) p^(j−i) (1−p)^(n−j).
fn q(i: u32, j: u32, n: u32, p: f64) -> f64 {
    if j < i {
        return 0.0;
    }
    choose(n - i, j - i) * p.powi((j - i) as i32) * (1.0 - p).powi((n - j) as i32)
}

/// W(p) for `n` followers when the leader needs `a` follower acks (a = ⌈(N−1)/2⌉ = f for odd N).
/// W(1) = 0; W(p) → ∞ as p → 0.
pub fn w(p: f64, n: u32, a: u32) -> f64 {
    assert!(a >= 1 && a <= n, "1 <= a <= n");
    if p <= 0.0 {
        return f64::INFINITY;
    }
    if p >= 1.0 {
        return 0.0;
    }
    // W_i = 0 for i >= a; solve i = a−1 down to 0:
    // W_i = (1 + Σ_{j=i+1}^{a−1} q_ij W_j) / (1 − q_ii)   (Eq 4.8)
    let mut wi = vec![0.0f64; a as usize];
    for i in (0..a).rev() {
        let mut sum = 1.0;
        for j in (i + 1)..a {
            sum += q(i, j, n, p) * wi[j as usize];
        }
        wi[i as usize] = sum / (1.0 - q(i, i, n, p));
    }
    // W(p) = Σ_{i=0}^{a−1} f(i; n) W_i   (Eq 4.9), with f(i; n) = q_0i.
    (0..a).map(|i| q(0, i, n, p) * wi[i as usize]).sum()
}

/// The right-hand side of Eq 4.1: d · max{λ, 1/D} (d in seconds, λ per second, D in seconds).
pub fn eq41_rhs(d_s: f64, lambda: f64, timer_d_s: f64) -> f64 {
    d_s * lambda.max(1.0 / timer_d_s)
}

/// P₂ = (θ/n) · min{1/λ, D} − δ (Eq 4.2 with the thesis's δ).
pub fn p2(theta: f64, n: u32, lambda: f64, timer_d_s: f64, delta: f64) -> f64 {
    (theta / n as f64) * (1.0 / lambda).min(timer_d_s) - delta
}

/// The inputs of one computation of p by a follower.
#[derive(Clone, Copy, Debug)]
pub struct Inputs {
    /// Followers (n = N − 1 when all are alive).
    pub followers: u32,
    /// Follower acks the leader needs (f for odd N).
    pub needed: u32,
    /// Measured abcast rate λ, per second.
    pub lambda: f64,
    /// Bound on ack arrivals θ (the thesis uses θ = λ).
    pub theta: f64,
    /// One-way leader → follower delay d, seconds.
    pub d_s: f64,
    /// The enforced coin-toss timer D, seconds.
    pub timer_d_s: f64,
    /// δ (the thesis's data imply 10⁻³; erratum 4).
    pub delta: f64,
    /// Grid steps: P = {0, 1/steps, …, 1} (the data imply 100).
    pub steps: u32,
}

/// Algorithm 1: an estimate of P₁ within δ above it, or `None` when ZabCT cannot meet both
/// inequalities (the follower then votes for Zab).
pub fn p1_estimate(x: &Inputs) -> Option<f64> {
    let rhs = eq41_rhs(x.d_s, x.lambda, x.timer_d_s);
    let p2 = p2(x.theta, x.followers, x.lambda, x.timer_d_s, x.delta);
    let step = 1.0 / x.steps as f64;
    let ok = |p: f64| w(p, x.followers, x.needed) < rhs;
    // P1u: the smallest grid point satisfying Eq 4.1 (W(1) = 0 satisfies it); P1l: the one below.
    let r = (1..=x.steps).find(|&r| ok(r as f64 * step))?;
    let p1u = r as f64 * step;
    let p1l = (r - 1) as f64 * step;
    if p2 <= p1l {
        return None; // case (i): P₂ < P₁
    }
    let mut pl = p2.min(p1u);
    // Round to the δ grid to avoid drift from repeated subtraction.
    let snap = |v: f64| (v / x.delta).round() * x.delta;
    let mut steps = 0;
    while ok(pl) && pl > p1l + x.delta / 2.0 {
        pl = snap(pl - x.delta);
        steps += 1;
        if steps > 1_000_000 {
            break;
        }
    }
    let p1e = snap(pl + x.delta);
    // Erratum 7: in case (iii) the loop may not run and p1e = P₂ + δ; re-check both bounds.
    if steps == 0 || !ok(p1e) || p1e > p2 + x.delta / 2.0 {
        return None;
    }
    Some(p1e)
}

/// How a follower picks p inside [P₁, P₂] (the thesis's static configurations, §5.6, and
/// App. D's optimal probabilities).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// ZabCT_u: p = P₂.
    Upper,
    /// ZabCT_a: p = (P₁ + P₂) / 2.
    Average,
    /// ZabCT_aa: p = ((P₁ + P₂) / 2 + P₁) / 2.
    LowerAverage,
    /// App. D: an optimal probability for a specific toss outcome (zab.md §5.8). The thesis
    /// does not say how p* ∈ P* is combined with [P₁, P₂] (it cites a paper not in our
    /// sources); ours is the largest p* inside [P₁, P₂] (the outcome-optimal coin that sends the
    /// most acks Eq 4.2 allows), or P₂ when no p* falls inside.
    Optimal,
}

/// How a ZabCT follower's coin is set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Choice {
    /// A fixed p: [T] Ch. 3's ZabCT (p = 0.5; Table E.4).
    Fixed(f64),
    /// Algorithm 1 every second, p placed in [P₁, P₂] by `policy`; θ = λ when `theta` is
    /// `None` (ZabCT_u, ZabCT_a, ZabCT_aa), or a fixed θ in acks per second (App. D's "large θ").
    Adaptive { policy: Policy, theta: Option<f64> },
}

impl Default for Choice {
    fn default() -> Self {
        Choice::Adaptive {
            policy: Policy::Upper,
            theta: None,
        }
    }
}

/// P*: p*(α : α + b) for every 1 ≤ α ≤ α + b < n (Eq 4.7), ascending, without repeats.
pub fn optimal_set(n: u32) -> Vec<f64> {
    let mut set = Vec::new();
    for alpha in 1..n {
        let beta = n - alpha;
        for b in 0..(n - alpha) {
            let prod: f64 = (0..=b)
                .map(|j| (beta - j) as f64 / (alpha + j) as f64)
                .product();
            let p = 1.0 / (1.0 + prod.powf(1.0 / (b + 1) as f64));
            if !set.iter().any(|&q: &f64| (q - p).abs() < 1e-9) {
                set.push(p);
            }
        }
    }
    set.sort_by(f64::total_cmp);
    set
}

/// The coin probability for these inputs, or `None` = infeasible (switch to Zab).
pub fn choose_p(x: &Inputs, policy: Policy) -> Option<f64> {
    let p1 = p1_estimate(x)?;
    let p2 = p2(x.theta, x.followers, x.lambda, x.timer_d_s, x.delta).min(1.0);
    let a = (p1 + p2) / 2.0;
    Some(match policy {
        Policy::Upper => p2,
        Policy::Average => a,
        Policy::LowerAverage => (a + p1) / 2.0,
        Policy::Optimal => optimal_set(x.followers)
            .into_iter()
            .rev()
            .find(|&q| q >= p1 && q <= p2)
            .unwrap_or(p2),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// zab.md §5.7 test vectors: the recursion matches [T] App. F for N = 3 and 5.
    #[test]
    fn w_matches_the_thesis_for_three_and_five() {
        for (n, a, p, want) in [
            (2, 1, 0.02, 24.253),
            (2, 1, 0.018, 27.030),
            (2, 1, 0.01, 49.251),
            (2, 1, 0.3, 0.961),
            (2, 1, 0.294, 0.994),
            (2, 1, 0.1, 4.263),
            (2, 1, 0.095, 4.526),
            (4, 2, 0.02, 28.374),
            (4, 2, 0.016, 35.666),
            (4, 2, 0.01, 57.541),
            (4, 2, 0.46, 0.469),
            (4, 2, 0.454, 0.485),
            (4, 2, 0.13, 3.689),
            (4, 2, 0.124, 3.906),
        ] {
            let got = w(p, n, a);
            assert!(
                close(got, want, 0.0015),
                "N={} p={p}: {got} vs {want}",
                n + 1
            );
        }
    }

    /// For N = 7 and 9 the thesis's printed values come from a wrong closed form (errata 6); the
    /// recursion gives zab.md's recomputed values instead.
    #[test]
    fn w_uses_the_recursion_not_the_misprinted_closed_form() {
        for (n, a, p, want, printed) in [
            (6, 3, 0.02, 30.024, 29.403),
            (6, 3, 0.05, 11.522, 10.922),
            (8, 4, 0.01, 62.635, 44.08),
            (8, 4, 0.04, 15.044, 11.335),
        ] {
            let got = w(p, n, a);
            assert!(
                close(got, want, 0.002),
                "N={} p={p}: {got} vs {want}",
                n + 1
            );
            assert!(!close(got, printed, 0.1));
        }
        // The closed form for N = 3: W = q00 / (1 − q00).
        let p: f64 = 0.37;
        let q00 = (1.0 - p).powi(2);
        assert!(close(w(p, 2, 1), q00 / (1.0 - q00), 1e-12));
        // Derived identity (zab.md §5.7): W(p) = W_0(p) − 1, and W is non-increasing.
        let mut last = f64::INFINITY;
        for k in 1..100 {
            let v = w(k as f64 / 100.0, 6, 3);
            assert!(v <= last + 1e-12);
            last = v;
        }
        assert_eq!(w(1.0, 4, 2), 0.0);
        assert!(w(0.0, 4, 2).is_infinite());
    }

    fn inputs(followers: u32, d_s: f64, lambda: f64) -> Inputs {
        Inputs {
            followers,
            needed: followers / 2,
            lambda,
            theta: lambda,
            d_s,
            timer_d_s: 1.0,
            delta: 0.001,
            steps: 100,
        }
    }

    /// Table F.1 (N = 3) and F.2 (N = 5), zero wait: Algorithm 1 reproduces P₁, and P₂ = 1/n − δ.
    #[test]
    fn algorithm_1_reproduces_tables_f1_and_f2() {
        for (n, d, lambda, p1) in [
            (2, 0.013, 2094.0, 0.018),
            (2, 0.014, 3128.0, 0.012),
            (2, 0.014, 3805.0, 0.010),
            (2, 0.015, 4238.0, 0.008),
            (2, 0.018, 5347.0, 0.006),
            (4, 0.02, 1846.0, 0.016),
            (4, 0.023, 2245.0, 0.012),
            (4, 0.027, 2437.0, 0.009),
            (4, 0.038, 2706.0, 0.006),
        ] {
            let x = inputs(n, d, lambda);
            let got = p1_estimate(&x).expect("feasible");
            assert!(
                close(got, p1, 1e-9),
                "N={} λ={lambda}: P1 {got} vs {p1}",
                n + 1
            );
            let p2v = p2(x.theta, n, lambda, x.timer_d_s, x.delta);
            assert!(close(p2v, 1.0 / n as f64 - 0.001, 1e-12));
            assert!(close(choose_p(&x, Policy::Upper).unwrap(), p2v, 1e-12));
        }
    }

    /// Erratum 7, case (iii): P₁l < P₂ < P₁u with P₂ < P₁. The printed algorithm returns P₂ + δ,
    /// which violates Eq 4.2; ours reports infeasible.
    #[test]
    fn algorithm_1_infeasible_cases_switch_to_zab() {
        // Small θ makes P₂ tiny: case (i) or (iii).
        let mut x = inputs(2, 0.013, 2094.0);
        x.theta = 2094.0 * 0.02; // P₂ = 0.01 − 0.001 = 0.009 < P₁ = 0.018
        assert_eq!(p1_estimate(&x), None);
        // Case (iii) exactly: P₁l = 0.01 < P₂ = 0.015 < P₁u = 0.02, and P₁ = 0.018 > P₂.
        x.theta = 2094.0 * 2.0 * 0.016;
        assert!(p2(x.theta, 2, x.lambda, x.timer_d_s, x.delta) > 0.01);
        assert_eq!(p1_estimate(&x), None);
        assert_eq!(choose_p(&x, Policy::Average), None);
        // A very slow system (d·λ tiny) needs p close to 1: infeasible with θ = λ and n = 4.
        let slow = inputs(4, 0.0001, 10.0);
        assert_eq!(p1_estimate(&slow), None);
    }

    /// zab.md §5.8: P* for n = 4 and the closed form p*(α : α) = α / n.
    #[test]
    fn optimal_probabilities_follow_eq_4_7() {
        let want = [0.25, 0.366, 0.5, 0.634, 0.75];
        let got = optimal_set(4);
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(close(*g, w, 0.001), "{got:?}");
        }
        assert_eq!(optimal_set(2), vec![0.5]);
        for a in 1..8 {
            assert!(optimal_set(8)
                .iter()
                .any(|&q| close(q, a as f64 / 8.0, 1e-9)));
        }
        // App. D's fixed large θ lets p rise above 1/n; the policy takes the largest p* within.
        let mut x = inputs(4, 0.02, 1846.0);
        x.theta = 2351.0;
        let p = choose_p(&x, Policy::Optimal).unwrap();
        let p2v = p2(x.theta, 4, x.lambda, x.timer_d_s, x.delta);
        assert!(p <= p2v && optimal_set(4).contains(&p), "{p} {p2v}");
    }

    #[test]
    fn policies_order() {
        let x = inputs(4, 0.02, 1846.0);
        let u = choose_p(&x, Policy::Upper).unwrap();
        let a = choose_p(&x, Policy::Average).unwrap();
        let aa = choose_p(&x, Policy::LowerAverage).unwrap();
        assert!(aa < a && a < u);
    }
}
