//! The messages of one phase of a collective: non-blocking MPI
//! point-to-point sends and receives (`MPI_Isend` / `MPI_Irecv`), polled
//! with `MPI_Test` until all complete or the group's timeout passes; the
//! requests still pending then name the lost ranks.
//!
//! **Does not own**: what is sent where (the communicator's all-reduce and
//! broadcast), nor the buffers, which the caller keeps alive until the
//! wait succeeds or leaks when it fails.

use super::{error_string, pause, MpiCommunicator, MpiElement};
use crate::collective::CollectiveError;
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::time::Instant;

/// One posted message: its request, the peer, and for a receive the
/// element count it must deliver.
struct Pending {
    request: ffi::MPI_Request,
    peer: usize,
    expect: Option<usize>,
}

/// The messages of one phase of one collective.
pub(super) struct Exchange<'c> {
    comm: &'c MpiCommunicator,
    op: &'static str,
    pending: Vec<Pending>,
}

impl<'c> Exchange<'c> {
    pub(super) fn new(comm: &'c MpiCommunicator, op: &'static str) -> Exchange<'c> {
        Exchange {
            comm,
            op,
            pending: Vec::new(),
        }
    }

    fn mpi_error(&self, code: c_int, peer: Option<usize>) -> CollectiveError {
        CollectiveError::Mpi {
            rank: self.comm.rank,
            op: self.op,
            peer,
            code,
            message: error_string(code),
        }
    }

    fn count(&self, len: usize) -> Result<c_int, CollectiveError> {
        c_int::try_from(len).map_err(|_| CollectiveError::TooLarge {
            op: self.op,
            bytes: len,
        })
    }

    /// Post a send of `data` to `peer`.
    ///
    /// # Safety
    /// `data` must stay allocated and unmodified until [`Exchange::wait`]
    /// returns `Ok`, or forever if it fails.
    pub(super) unsafe fn send<T: MpiElement>(
        &mut self,
        data: &[T],
        peer: usize,
        tag: c_int,
    ) -> Result<(), CollectiveError> {
        let count = self.count(data.len())?;
        // SAFETY: `data` is valid for `count` elements of T's datatype and
        // outlives the request (the caller's contract).
        self.post(peer, None, |comm, request| unsafe {
            ffi::MPI_Isend(
                data.as_ptr() as *const c_void,
                count,
                T::datatype(),
                peer as c_int,
                tag,
                comm,
                request,
            )
        })
    }

    /// Post a receive of exactly `data.len()` elements from `peer`.
    ///
    /// # Safety
    /// As [`Exchange::send`], and `data` is not read until the wait
    /// succeeded.
    pub(super) unsafe fn recv<T: MpiElement>(
        &mut self,
        data: &mut [T],
        peer: usize,
        tag: c_int,
    ) -> Result<(), CollectiveError> {
        let count = self.count(data.len())?;
        let expect = Some(data.len());
        // SAFETY: `data` is valid for writes of `count` elements and
        // outlives the request (the caller's contract).
        self.post(peer, expect, |comm, request| unsafe {
            ffi::MPI_Irecv(
                data.as_mut_ptr() as *mut c_void,
                count,
                T::datatype(),
                peer as c_int,
                tag,
                comm,
                request,
            )
        })
    }

    /// Post one message with `start` (MPI_Isend or MPI_Irecv on the
    /// group's communicator, filling the request) and keep it pending.
    fn post(
        &mut self,
        peer: usize,
        expect: Option<usize>,
        start: impl FnOnce(ffi::MPI_Comm, *mut ffi::MPI_Request) -> c_int,
    ) -> Result<(), CollectiveError> {
        // SAFETY: a null request is the documented initial value.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        let code = start(self.comm.comm, &mut request);
        if code != ffi::MPI_SUCCESS as c_int {
            return Err(self.mpi_error(code, Some(peer)));
        }
        self.pending.push(Pending {
            request,
            peer,
            expect,
        });
        Ok(())
    }

    /// Poll every posted message until all completed, or the deadline
    /// passed (the ranks still pending are lost), or one failed.
    pub(super) fn wait<T: MpiElement>(mut self, started: Instant) -> Result<(), CollectiveError> {
        let deadline = started + self.comm.timeout;
        while !self.pending.is_empty() {
            let mut i = 0;
            while i < self.pending.len() {
                let p = &mut self.pending[i];
                let mut flag: c_int = 0;
                // SAFETY: a zeroed status is a valid out-parameter.
                let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
                // SAFETY: `request` is a live request posted by this exchange.
                let code = unsafe { ffi::MPI_Test(&mut p.request, &mut flag, &mut status) };
                if code != ffi::MPI_SUCCESS as c_int {
                    let peer = p.peer;
                    return Err(self.mpi_error(code, Some(peer)));
                }
                if flag == 0 {
                    i += 1;
                    continue;
                }
                if let Some(expect) = p.expect {
                    let mut got: c_int = 0;
                    // SAFETY: `status` was filled by the completed receive.
                    unsafe { ffi::MPI_Get_count(&status, T::datatype(), &mut got) };
                    if got as usize != expect {
                        return Err(CollectiveError::Length {
                            rank: self.comm.rank,
                            op: self.op,
                            peer: p.peer,
                            expected: expect,
                            got: got.max(0) as usize,
                        });
                    }
                }
                self.pending.swap_remove(i);
            }
            if self.pending.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                let mut lost: Vec<usize> = self.pending.iter().map(|p| p.peer).collect();
                lost.sort_unstable();
                lost.dedup();
                return Err(CollectiveError::LostRanks {
                    rank: self.comm.rank,
                    op: self.op,
                    lost,
                    waited: started.elapsed(),
                });
            }
            pause(started);
        }
        Ok(())
    }
}
