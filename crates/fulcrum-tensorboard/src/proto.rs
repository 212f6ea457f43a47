//! The protocol buffers of a TensorBoard event file, as `prost` messages: the fields fulcrum
//! writes of `tensorboard/compat/proto/{event,summary,tensor,tensor_shape}.proto` (the field
//! numbers are those files'; a reader ignores the fields left out).

/// `tensorboard.Event`: one record of the file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    #[prost(int64, tag = "2")]
    pub step: i64,
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

/// `Event.what`: the part of the oneof fulcrum writes.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// The first record of a file: `brain.Event:2`.
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorboard.Summary`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<Value>,
}

/// `tensorboard.Summary.Value`: one tagged value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Value {
    #[prost(string, tag = "1")]
    pub tag: String,
    #[prost(message, optional, tag = "9")]
    pub metadata: Option<SummaryMetadata>,
    #[prost(oneof = "Content", tags = "2, 5, 8")]
    pub value: Option<Content>,
}

/// `Summary.Value.value`: the kinds fulcrum writes.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Content {
    /// A scalar (read by TensorBoard's scalars plugin as is).
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    #[prost(message, tag = "5")]
    Histo(HistogramProto),
    /// A tensor, here a string one for the text plugin.
    #[prost(message, tag = "8")]
    Tensor(TensorProto),
}

/// `tensorboard.SummaryMetadata`: which plugin shows a value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryMetadata {
    #[prost(message, optional, tag = "1")]
    pub plugin_data: Option<PluginData>,
}

/// `SummaryMetadata.PluginData`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PluginData {
    #[prost(string, tag = "1")]
    pub plugin_name: String,
    #[prost(bytes = "vec", tag = "2")]
    pub content: Vec<u8>,
}

/// `tensorboard.HistogramProto`: bucket `i` counts the values in
/// `(bucket_limit[i - 1], bucket_limit[i]]`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HistogramProto {
    #[prost(double, tag = "1")]
    pub min: f64,
    #[prost(double, tag = "2")]
    pub max: f64,
    #[prost(double, tag = "3")]
    pub num: f64,
    #[prost(double, tag = "4")]
    pub sum: f64,
    #[prost(double, tag = "5")]
    pub sum_squares: f64,
    #[prost(double, repeated, tag = "6")]
    pub bucket_limit: Vec<f64>,
    #[prost(double, repeated, tag = "7")]
    pub bucket: Vec<f64>,
}

/// `tensorboard.TensorProto`, as far as a string tensor needs.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// `DataType`: 7 is `DT_STRING`.
    #[prost(int32, tag = "1")]
    pub dtype: i32,
    #[prost(message, optional, tag = "2")]
    pub tensor_shape: Option<TensorShapeProto>,
    #[prost(bytes = "vec", repeated, tag = "8")]
    pub string_val: Vec<Vec<u8>>,
}

/// `tensorboard.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    pub dim: Vec<Dim>,
}

/// `TensorShapeProto.Dim`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dim {
    #[prost(int64, tag = "1")]
    pub size: i64,
}

/// `DataType.DT_STRING`.
pub const DT_STRING: i32 = 7;
