# Image folders to tensor data sets (`dptrain data images`): JPEG through libturbojpeg, PNG
# through libspng, both found with pkg-config. Without either, the code still builds and the
# command says it was built without image support.
set(DPT_IMAGES_FOUND FALSE)
if(PkgConfig_FOUND)
  pkg_check_modules(DPT_TURBOJPEG QUIET IMPORTED_TARGET libturbojpeg)
  pkg_check_modules(DPT_SPNG QUIET IMPORTED_TARGET spng)
  if(DPT_TURBOJPEG_FOUND AND DPT_SPNG_FOUND)
    set(DPT_IMAGES_FOUND TRUE)
  endif()
endif()
dpt_optional_dependency(DPT_WITH_IMAGES DPT_IMAGES_FOUND
                        "image folders for dptrain data images (libturbojpeg, libspng)"
                        "libturbojpeg0-dev libspng-dev")
target_sources(dptrain_prep PRIVATE ${CMAKE_CURRENT_LIST_DIR}/decode.c
               ${CMAKE_CURRENT_LIST_DIR}/resize.c ${CMAKE_CURRENT_LIST_DIR}/folder.c)
if(DPT_WITH_IMAGES)
  target_compile_definitions(dptrain_prep PRIVATE DPT_WITH_IMAGES)
  target_link_libraries(dptrain_prep PRIVATE PkgConfig::DPT_TURBOJPEG PkgConfig::DPT_SPNG)
endif()
