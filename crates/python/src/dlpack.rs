//! DLPack export of a `Column`: the capsule behind `__dlpack__`, through which PyTorch,
//! JAX, NumPy and others take flumen's buffers without a copy.
//!
//! The layouts are DLPack's C ABI (`dlpack.h`, version 1.0). A versioned capsule
//! (`dltensor_versioned`) is given when the consumer asks for DLPack 1.0 or later and carries
//! the read-only flag; the legacy capsule (`dltensor`) has no such flag, so the consumer gets
//! a writable tensor over buffers it must not write.

use std::ffi::{c_void, CStr};

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::{ffi, Bound};

/// `DLDevice`.
#[repr(C)]
struct Device {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
struct DType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
struct Tensor {
    data: *mut c_void,
    device: Device,
    ndim: i32,
    dtype: DType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// `DLManagedTensor` (the legacy capsule's payload).
#[repr(C)]
struct Managed {
    tensor: Tensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut Managed)>,
}

/// `DLManagedTensorVersioned`.
#[repr(C)]
struct ManagedVersioned {
    major: u32,
    minor: u32,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut ManagedVersioned)>,
    flags: u64,
    tensor: Tensor,
}

/// `kDLCPU`.
const CPU: i32 = 1;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`.
const READ_ONLY: u64 = 1;
const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";

/// What a capsule keeps alive: the Arrow array owning the buffer, and the shape and
/// strides the tensor points at.
struct Context {
    _values: ArrayRef,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

/// DLPack's code and width of a primitive Arrow type.
fn dtype(dt: &DataType) -> Option<DType> {
    let (code, bits) = match dt {
        DataType::Int8 => (0, 8),
        DataType::Int16 => (0, 16),
        DataType::Int32 => (0, 32),
        DataType::Int64 => (0, 64),
        DataType::UInt8 => (1, 8),
        DataType::UInt16 => (1, 16),
        DataType::UInt32 => (1, 32),
        DataType::UInt64 => (1, 64),
        DataType::Float16 => (2, 16),
        DataType::Float32 => (2, 32),
        DataType::Float64 => (2, 64),
        _ => return None,
    };
    Some(DType { code, bits, lanes: 1 })
}

/// A DLPack capsule over `values` (a primitive array without nulls, the flattened values of
/// a tensor of `shape`, row-major). `versioned` gives DLPack 1.0's capsule, read-only;
/// `boolean` says that `values` are bools, a byte each.
pub fn capsule<'py>(
    py: Python<'py>,
    values: &ArrayRef,
    shape: &[usize],
    versioned: bool,
    boolean: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let data = values.to_data();
    let dtype = match boolean {
        // `kDLBool`: one byte per value, 0 or 1.
        true => DType { code: 6, bits: 8, lanes: 1 },
        false => dtype(data.data_type()).ok_or_else(|| PyBufferError::new_err("not a primitive column"))?,
    };
    let width = data.data_type().primitive_width().expect("a primitive column");
    let address = data.buffers()[0].as_ptr() as usize + data.offset() * width;
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    // Row-major strides in elements.
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    let mut ctx = Box::new(Context { _values: values.clone(), shape, strides });
    let tensor = Tensor {
        data: address as *mut c_void,
        device: Device { device_type: CPU, device_id: 0 },
        ndim: ctx.shape.len() as i32,
        dtype,
        shape: ctx.shape.as_mut_ptr(),
        strides: ctx.strides.as_mut_ptr(),
        byte_offset: 0,
    };
    let manager_ctx = Box::into_raw(ctx).cast::<c_void>();
    let (pointer, name, destructor): (*mut c_void, &CStr, unsafe extern "C" fn(*mut ffi::PyObject)) = if versioned {
        let managed = Box::new(ManagedVersioned {
            major: 1,
            minor: 0,
            manager_ctx,
            deleter: Some(delete_versioned),
            flags: READ_ONLY,
            tensor,
        });
        (Box::into_raw(managed).cast(), VERSIONED, drop_versioned)
    } else {
        let managed = Box::new(Managed { tensor, manager_ctx, deleter: Some(delete_legacy) });
        (Box::into_raw(managed).cast(), LEGACY, drop_legacy)
    };
    // SAFETY: `pointer` is a live allocation the destructor below frees unless a consumer
    // took it (and with it the duty to call its deleter); `name` is static.
    unsafe {
        let capsule = ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor));
        if capsule.is_null() {
            if versioned {
                delete_versioned(pointer.cast());
            } else {
                delete_legacy(pointer.cast());
            }
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule))
    }
}

/// The deleter of a legacy tensor: frees it and what it kept alive.
unsafe extern "C" fn delete_legacy(managed: *mut Managed) {
    // SAFETY: made by `capsule` with `Box::into_raw`, called once (by the consumer or the
    // capsule's destructor, never both: a consumer renames the capsule).
    let managed = unsafe { Box::from_raw(managed) };
    drop(unsafe { Box::from_raw(managed.manager_ctx.cast::<Context>()) });
}

/// The deleter of a versioned tensor.
unsafe extern "C" fn delete_versioned(managed: *mut ManagedVersioned) {
    // SAFETY: as `delete_legacy`.
    let managed = unsafe { Box::from_raw(managed) };
    drop(unsafe { Box::from_raw(managed.manager_ctx.cast::<Context>()) });
}

/// A legacy capsule's destructor: frees the tensor unless a consumer took it (a consumer
/// renames the capsule `used_dltensor`).
unsafe extern "C" fn drop_legacy(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python on a capsule `capsule` made, with the GIL held.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            delete_legacy(ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr()).cast());
        }
    }
}

/// A versioned capsule's destructor, as `drop_legacy`.
unsafe extern "C" fn drop_versioned(capsule: *mut ffi::PyObject) {
    // SAFETY: as `drop_legacy`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            delete_versioned(ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr()).cast());
        }
    }
}
