# Installation (`make install PREFIX=...` = `cmake --install build --prefix PREFIX`): the static
# library, the public headers under PREFIX/include/fsdp/, a pkg-config file and the tools; and the
# example in examples/, built here against the same public headers a user gets.
include(GNUInstallDirs)
set(FSDP_VERSION 0.1.0)

# The public surface, as paths under src/: what <fsdp/fsdp.h> pulls in, plus the modules a user
# composes a model from. Everything else (fsdp_internal.h, comm/comm_group.h and the transports' headers, device/cpu/, ckpt/, cli/,
# ...) stays internal. Installed as fsdp/fsdp.h and fsdp/<path> (cmake/fsdp_public_headers.cmake).
set(FSDP_PUBLIC_HEADERS
    fsdp/fsdp.h
    core/status.h core/rng.h core/alloc.h tensor/tensor.h comm/comm.h device/device.h device/device_comm.h kernels/kernels.h kernels/kernel_list.h kernels/kernel_params.h optim/optim.h optim/muon.h
    nn/param.h nn/nn_ctx.h nn/gemm_param.h nn/linear.h nn/lora.h nn/layernorm.h nn/attention.h nn/embedding.h nn/loss.h
    nn/rmsnorm.h nn/transformer_block.h nn/sequential.h nn/encoder_stack.h nn/gpt2.h nn/llama.h nn/causal_lm.h)

set(FSDP_PUBLIC_INCLUDE_DIR ${PROJECT_BINARY_DIR}/include)  # the generated tree: fsdp/fsdp.h, fsdp/nn/...
set(FSDP_PUBLIC_SOURCES "")
set(FSDP_PUBLIC_OUTPUTS "")
foreach(h ${FSDP_PUBLIC_HEADERS})
  list(APPEND FSDP_PUBLIC_SOURCES ${PROJECT_SOURCE_DIR}/src/${h})
  if(h STREQUAL "fsdp/fsdp.h")
    list(APPEND FSDP_PUBLIC_OUTPUTS fsdp/fsdp.h)
  else()
    list(APPEND FSDP_PUBLIC_OUTPUTS fsdp/${h})
  endif()
endforeach()
string(REPLACE ";" "," fsdp_headers_arg "${FSDP_PUBLIC_HEADERS}")
add_custom_command(
  OUTPUT ${PROJECT_BINARY_DIR}/fsdp_public_headers.stamp
  COMMAND ${CMAKE_COMMAND} -DSRC_DIR=${PROJECT_SOURCE_DIR}/src -DOUT_DIR=${FSDP_PUBLIC_INCLUDE_DIR}
          -DHEADERS=${fsdp_headers_arg} -P ${PROJECT_SOURCE_DIR}/cmake/fsdp_public_headers.cmake
  COMMAND ${CMAKE_COMMAND} -E touch ${PROJECT_BINARY_DIR}/fsdp_public_headers.stamp
  DEPENDS ${FSDP_PUBLIC_SOURCES} ${PROJECT_SOURCE_DIR}/cmake/fsdp_public_headers.cmake
  COMMENT "Writing the public headers (build/include/fsdp)"
  VERBATIM)
add_custom_target(fsdp-public-headers ALL DEPENDS ${PROJECT_BINARY_DIR}/fsdp_public_headers.stamp)

# The example, compiled in every build (warnings as the library's) so API drift breaks it here;
# tests/install builds it again against an installed copy through pkg-config.
add_executable(fsdp-example-custom-model examples/custom_model.c)
target_include_directories(fsdp-example-custom-model BEFORE PRIVATE ${FSDP_PUBLIC_INCLUDE_DIR})
target_link_libraries(fsdp-example-custom-model fsdp)
add_dependencies(fsdp-example-custom-model fsdp-public-headers)

install(TARGETS fsdp ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS fsdp-train fsdp-minimal fsdp-ckpt fsdp-plan fsdp-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(h ${FSDP_PUBLIC_OUTPUTS})
  get_filename_component(dir ${h} DIRECTORY)
  install(FILES ${FSDP_PUBLIC_INCLUDE_DIR}/${h} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${dir})
endforeach()

# pkg-config: the link line of the library's dependencies, as found by this configure. Libraries
# found as full paths become -L<dir> -l<name>.
set(fsdp_pc_deps "")
foreach(lib ${OPENBLAS_LIBRARY} ${MPI_C_LIBRARIES})
  get_filename_component(dir ${lib} DIRECTORY)
  get_filename_component(name ${lib} NAME_WE)
  string(REGEX REPLACE "^lib" "" name ${name})
  list(APPEND fsdp_pc_deps "-L${dir}" "-l${name}")
endforeach()
list(APPEND fsdp_pc_deps ${MPI_C_LINK_FLAGS} ${OpenMP_C_FLAGS} -lm)
if(FSDP_HAVE_CUDA)  # the CUDA device: its runtime (cuBLAS is loaded at run time, not linked: cuda_blas.c),
  # dlopen, and the C++ runtime the CUDA kernels' objects call (static guards, exception personality)
  get_filename_component(fsdp_cudart_dir ${CUDA_cudart_LIBRARY} DIRECTORY)
  list(APPEND fsdp_pc_deps "-L${fsdp_cudart_dir}" "-Wl,-rpath,${fsdp_cudart_dir}" -lcudart -lstdc++ -ldl)
endif()
if(FSDP_SANITIZE)  # a sanitized library links only into sanitized programs
  list(APPEND fsdp_pc_deps -fsanitize=address,undefined)
endif()
list(REMOVE_DUPLICATES fsdp_pc_deps)
string(REPLACE ";" " " FSDP_PC_DEPS "${fsdp_pc_deps}")
set(FSDP_PC_NATIVE_NOTE "")
if(FSDP_NATIVE)
  set(FSDP_PC_NATIVE_NOTE ", built with -march=native: runs on CPUs like the build machine's")
endif()
# Everything but the prefix is known now; the prefix only at install time (cmake --install --prefix).
set(FSDP_PC_PREFIX "@FSDP_PC_PREFIX@")
configure_file(${PROJECT_SOURCE_DIR}/cmake/fsdp.pc.in ${PROJECT_BINARY_DIR}/fsdp.pc.in @ONLY)
install(CODE "
  set(FSDP_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${PROJECT_BINARY_DIR}/fsdp.pc.in\" \"${PROJECT_BINARY_DIR}/fsdp.pc\" @ONLY)")
install(FILES ${PROJECT_BINARY_DIR}/fsdp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The in-tree example as a C test on 2 ranks (so `make test-asan` runs it under the sanitizers too);
# tests/install runs the installed build of it and compares ranks.
add_test(NAME example_custom_model_np2 COMMAND ${FSDP_TEST_WRAP} ${MPIEXEC_EXECUTABLE} -np 2 $<TARGET_FILE:fsdp-example-custom-model> 10)
set_tests_properties(example_custom_model_np2 PROPERTIES TIMEOUT 120 ENVIRONMENT
  "OMP_NUM_THREADS=1;OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1")
