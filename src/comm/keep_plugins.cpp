// Sanitizer builds only (cmake -DATOLL_SANITIZE=...; tests/sanitize/run.sh): dlclose made a no-op
// in every program that runs MPI, so that Open MPI's plugins stay mapped after MPI_Finalize.
// Open MPI keeps memory allocated in MPI_Init for the life of the process; once its plugins were
// unloaded, LeakSanitizer printed those allocations' frames as "<unknown module>", which no
// suppression can name. With the plugins mapped, tests/sanitize/lsan.supp names them by library
// and the fast unwinder suffices (the slow one made `atoll plan` 8x slower under ASan). Exported
// from the executable (-Wl,--export-dynamic-symbol=dlclose) so that it takes the place of libc's.
extern "C" int dlclose(void* /*handle*/) { return 0; }
