// The engine's exceptions. Every one derives from EngineError; the bindings turn each
// into the class of the same meaning in engine_native/errors.py (bindings/module.cpp),
// std::bad_alloc into OutOfMemoryError and any other std::exception into EngineError.
#pragma once

#include <stdexcept>
#include <string>

namespace cbs {

// Anything the engine refused (bad input, a failed computation).
struct EngineError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The model file is missing, unreadable, corrupt, foreign or inconsistent with itself.
struct ModelError : EngineError {
    using EngineError::EngineError;
};

// A synthesis or engine option is outside its range (core/options.h).
struct ParameterError : EngineError {
    using EngineError::EngineError;
};

// A voice (conditioning tensors, a recording) cannot be used.
struct VoiceError : EngineError {
    using EngineError::EngineError;
};

// A computation was cancelled before it finished.
struct CancelledError : EngineError {
    using EngineError::EngineError;
};

// A resource (a T3 KV cache) is held by another stream.
struct BusyError : EngineError {
    using EngineError::EngineError;
};

// A device that is not present, or one that failed to start.
struct DeviceError : EngineError {
    using EngineError::EngineError;
};

}  // namespace cbs
