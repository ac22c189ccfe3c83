//! One vocabulary: pipeline JSON spells dtypes, file formats and functions as `explain`,
//! specs and errors do, and JSON written with the earlier spellings still reads.

use flumen_ir::{
    AvroFormat, CsvFormat, DType, ElementSpec, FieldSpec, FileFormat, Func, ParquetFormat, RecordCompression,
};
use serde_json::{json, Value};

#[test]
fn dtypes_serialize_as_their_names() {
    for t in DType::ALL {
        assert_eq!(serde_json::to_value(t).unwrap(), json!(t.name()), "{t:?}");
        assert_eq!(serde_json::from_value::<DType>(json!(t.name())).unwrap(), t);
    }
    // The names are tf.data's, not Rust's or Arrow's.
    let names: Vec<&str> = DType::ALL.iter().map(|t| t.name()).collect();
    for expected in ["uint8", "uint64", "string", "bytes"] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }
}

#[test]
fn decimals_carry_their_precision_and_scale() {
    let t = DType::Decimal128 { precision: 9, scale: 2 };
    assert_eq!(t.to_string(), "decimal128(9, 2)");
    assert_eq!(DType::from_name("decimal128(9, 2)"), Some(t));
    assert_eq!(DType::from_name("decimal128(39, 2)"), None, "at most 38 digits");
    assert_eq!(serde_json::to_value(t).unwrap(), json!({"decimal128": {"precision": 9, "scale": 2}}));
    assert_eq!(serde_json::from_value::<DType>(json!({"decimal128": {"precision": 9, "scale": 2}})).unwrap(), t);
    assert_eq!(DType::from_arrow(&t.to_arrow()).unwrap(), t);
    for t in [DType::Date32, DType::TimeMicros, DType::TimestampMicros] {
        assert_eq!(DType::from_arrow(&t.to_arrow()).unwrap(), t);
    }
}

#[test]
fn earlier_dtype_spellings_still_read() {
    for (old, t) in [
        ("u_int8", DType::UInt8),
        ("u_int16", DType::UInt16),
        ("u_int32", DType::UInt32),
        ("u_int64", DType::UInt64),
        ("utf8", DType::Utf8),
        ("binary", DType::Binary),
    ] {
        assert_eq!(serde_json::from_value::<DType>(json!(old)).unwrap(), t, "{old}");
    }
    let field: FieldSpec = serde_json::from_value(json!({"name": "s", "dtype": "utf8", "shape": []})).unwrap();
    assert_eq!(field.dtype, DType::Utf8);
}

fn format_tag(format: &FileFormat) -> String {
    match serde_json::to_value(format).unwrap() {
        Value::Object(map) => map["format"].as_str().unwrap().to_string(),
        other => panic!("a format serializes as an object, got {other}"),
    }
}

#[test]
fn file_formats_serialize_as_their_names() {
    let schema = ElementSpec::new(vec![FieldSpec::scalar("x", DType::Int64)]).unwrap();
    let formats = [
        FileFormat::Csv(CsvFormat { schema: schema.clone(), header: true, delimiter: ',', columns: None }),
        FileFormat::Parquet(ParquetFormat { schema: schema.clone(), columns: None, predicate: None }),
        FileFormat::IpcFile { schema: schema.clone() },
        FileFormat::IpcStream { schema: schema.clone() },
        FileFormat::TextLines,
        FileFormat::TfRecord { compression: RecordCompression::Gzip },
        FileFormat::Avro(AvroFormat {
            schema: schema.clone(),
            columns: Some(vec!["x".into()]),
            shuffle_blocks: Some(flumen_ir::BlockShuffle { seed: Some(3) }),
            reader_schema: None,
        }),
        FileFormat::Chunks { schema },
    ];
    for format in formats {
        assert_eq!(format_tag(&format), format.name());
        let back: FileFormat = serde_json::from_value(serde_json::to_value(&format).unwrap()).unwrap();
        assert_eq!(back, format);
    }
    let old: FileFormat = serde_json::from_value(json!({"format": "tf_record", "compression": "zlib"})).unwrap();
    assert_eq!(old, FileFormat::TfRecord { compression: RecordCompression::Zlib });
}

#[test]
fn functions_serialize_as_their_names() {
    for f in Func::ALL {
        assert_eq!(serde_json::to_value(f).unwrap(), json!(f.name()), "{f:?}");
    }
}
