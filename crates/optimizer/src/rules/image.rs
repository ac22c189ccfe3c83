//! Image rewrites.
//!
//! - `jpeg-row-decode`: a crop of a decoded JPEG (`crop`, `central_crop`, `random_crop`,
//!   `random_resized_crop` over `decode_jpeg`) becomes the same crop over
//!   `decode_jpeg_rows`, which lets the crop choose its window from the JPEG's header and
//!   decode only the rows down to the window's bottom. The pixels kept are bit-identical
//!   (see `flumen_udf::image::decode`); the decoder saves the rows below the window.

use flumen_ir::{Expr, Func, MapFn, NamedExpr};

use super::{builtin, Match, Rule};

/// The rules of this module.
pub fn rules() -> Vec<Rule> {
    vec![
        builtin("jpeg-row-decode", "(map ?f ?c ?d ?x)", |m| row_decode(m, false)),
        builtin("jpeg-row-decode-batch", "(map_and_batch ?f ?n ?r ?c ?d ?x)", |m| row_decode(m, true)),
    ]
}

fn row_decode(m: &mut Match, batched: bool) -> Option<egg::Id> {
    let (func, vectorized) = m.func("?f")?;
    let op = m.map_with(row_decoded(&func)?, vectorized, batched)?;
    let x = m.id("?x")?;
    m.add(op, &[x])
}

/// `func` with every crop of a `decode_jpeg` reading a `decode_jpeg_rows`, or `None` when
/// it has none.
fn row_decoded(func: &MapFn) -> Option<MapFn> {
    let MapFn::Exprs { outputs, keep_input } = func else { return None };
    let rewritten: Vec<NamedExpr> =
        outputs.iter().map(|o| NamedExpr { name: o.name.clone(), expr: rewrite(&o.expr) }).collect();
    (rewritten != *outputs).then_some(MapFn::Exprs { outputs: rewritten, keep_input: *keep_input })
}

fn rewrite(expr: &Expr) -> Expr {
    match expr {
        Expr::Call { func, args } if is_crop(*func) => {
            let mut args: Vec<Expr> = args.iter().map(rewrite).collect();
            if let Some(Expr::Call { func: inner @ Func::DecodeJpeg, .. }) = args.first_mut() {
                *inner = Func::DecodeJpegRows;
            }
            Expr::Call { func: *func, args }
        }
        Expr::Call { func, args } => Expr::Call { func: *func, args: args.iter().map(rewrite).collect() },
        Expr::Unary { op, arg } => Expr::Unary { op: *op, arg: Box::new(rewrite(arg)) },
        Expr::Cast { arg, to } => Expr::Cast { arg: Box::new(rewrite(arg)), to: *to },
        Expr::Binary { op, left, right } => {
            Expr::Binary { op: *op, left: Box::new(rewrite(left)), right: Box::new(rewrite(right)) }
        }
        Expr::Case { branches, otherwise } => Expr::Case {
            branches: branches.iter().map(|(c, v)| (rewrite(c), rewrite(v))).collect(),
            otherwise: otherwise.as_ref().map(|o| Box::new(rewrite(o))),
        },
        Expr::Column(_) | Expr::Literal(_) => expr.clone(),
    }
}

fn is_crop(func: Func) -> bool {
    matches!(func, Func::Crop | Func::CentralCrop | Func::RandomCrop | Func::RandomResizedCrop)
}

#[cfg(test)]
mod tests {
    use flumen_ir::Scalar;

    use super::*;
    use flumen_ir::build::{call, int};

    #[test]
    fn crops_of_jpeg_decodes_read_rows_and_nothing_else_changes() {
        let decode = |f| call(f, vec![Expr::Column("image".into()), int(3)]);
        let crop = |f| call(Func::RandomCrop, vec![decode(f), int(8), int(8), int(7)]);
        let flip = |f| call(Func::RandomFlipLeftRight, vec![crop(f), int(7)]);
        assert_eq!(rewrite(&flip(Func::DecodeJpeg)), flip(Func::DecodeJpegRows));
        // A resize of the whole image, or a crop of a PNG, keeps its decode.
        let resize = call(
            Func::Resize,
            vec![decode(Func::DecodeJpeg), int(4), int(4), Expr::Literal(Scalar::Utf8("area".into()))],
        );
        assert_eq!(rewrite(&resize), resize);
        assert_eq!(rewrite(&crop(Func::DecodePng)), crop(Func::DecodePng));
    }
}
