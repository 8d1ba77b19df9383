/* dptrain: symbol visibility. Only dpt_ symbols marked DPT_API are exported from the shared
 * library; everything else is hidden. DPT_STATIC is defined for users of the static library. */
#ifndef DPTRAIN_EXPORT_H
#define DPTRAIN_EXPORT_H

#if defined(DPT_STATIC)
#define DPT_API
#elif defined(_WIN32)
#if defined(DPT_BUILDING)
#define DPT_API __declspec(dllexport)
#else
#define DPT_API __declspec(dllimport)
#endif
#else
#define DPT_API __attribute__((visibility("default")))
#endif

#endif
