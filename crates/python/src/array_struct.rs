//! NumPy's array interface as a C structure (`__array_struct__`, numpy's
//! `PyArrayInterface`): a capsule NumPy reads without the dict and type string of
//! `__array_interface__`, which makes each view of a column cheaper to hand out.

use std::ffi::c_void;

use arrow::array::ArrayRef;
use pyo3::prelude::*;
use pyo3::{ffi, Bound};

/// `PyArrayInterface`.
#[repr(C)]
struct Interface {
    two: i32,
    nd: i32,
    typekind: u8,
    itemsize: i32,
    flags: i32,
    shape: *mut isize,
    strides: *mut isize,
    data: *mut c_void,
    descr: *mut ffi::PyObject,
}

/// `NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_NOTSWAPPED`: not writeable.
const FLAGS: i32 = 0x1 | 0x100 | 0x200;

/// `NPY_ARR_HAS_DESCR`: `descr` gives the dtype (a datetime's unit, which `typekind` and
/// `itemsize` cannot: without it NumPy makes a `datetime64` of generic unit).
const HAS_DESCR: i32 = 0x800;

/// The interface and the dims (and dtype description) it points at, freed with the capsule
/// (NumPy copies the dims and keeps the exporting object, not the capsule, as the array's
/// base).
#[repr(C)]
struct Owned {
    interface: Interface,
    _dims: Vec<isize>,
    _descr: Option<Py<PyAny>>,
}

/// A capsule describing `values` (a primitive array without nulls) as a C-contiguous array
/// of `shape`, its NumPy type string `typestr` (`"<f4"`, `"|u1"`, ...).
pub fn capsule<'py>(py: Python<'py>, values: &ArrayRef, shape: &[usize], typestr: &str) -> PyResult<Bound<'py, PyAny>> {
    let data = values.to_data();
    let width = data.data_type().primitive_width().expect("a primitive column");
    let address = data.buffers()[0].as_ptr() as usize + data.offset() * width;
    let nd = shape.len();
    // Shape then strides, in bytes, row-major.
    let mut dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    let mut strides = vec![width as isize; nd];
    for i in (0..nd.saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1] as isize;
    }
    dims.extend(strides);
    let typekind = typestr.as_bytes()[1];
    // A unit (`<M8[us]`) is only in the type string: hand NumPy that as the description.
    let descr: Option<Py<PyAny>> =
        typestr.contains('[').then(|| pyo3::types::PyString::new(py, typestr).into_any().unbind());
    let mut owned = Box::new(Owned {
        interface: Interface {
            two: 2,
            nd: nd as i32,
            typekind,
            itemsize: width as i32,
            flags: if descr.is_some() { FLAGS | HAS_DESCR } else { FLAGS },
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            data: address as *mut c_void,
            descr: descr.as_ref().map_or(std::ptr::null_mut(), |d| d.as_ptr()),
        },
        _dims: dims,
        _descr: descr,
    });
    let base = owned._dims.as_mut_ptr();
    owned.interface.shape = base;
    // SAFETY: `_dims` holds `2 * nd` values: the shape, then the strides.
    owned.interface.strides = unsafe { base.add(nd) };
    let pointer = Box::into_raw(owned);
    // SAFETY: the capsule owns `pointer` (NumPy reads it with a null name) and frees it in
    // `release`; the interface is the first field, so the pointer is the interface's.
    unsafe {
        let capsule = ffi::PyCapsule_New(pointer.cast(), std::ptr::null(), Some(release));
        if capsule.is_null() {
            drop(Box::from_raw(pointer));
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, capsule))
    }
}

/// The capsule's destructor.
unsafe extern "C" fn release(capsule: *mut ffi::PyObject) {
    // SAFETY: made by `capsule` from a boxed `Owned`, freed once, here.
    unsafe {
        let pointer = ffi::PyCapsule_GetPointer(capsule, std::ptr::null());
        if !pointer.is_null() {
            drop(Box::from_raw(pointer.cast::<Owned>()));
        }
    }
}
