/* confdefs.h */
#define PACKAGE_NAME "shmtrace"
#define PACKAGE_TARNAME "shmtrace"
#define PACKAGE_VERSION "0.1.0"
#define PACKAGE_STRING "shmtrace 0.1.0"
#define PACKAGE_BUGREPORT ""
#define PACKAGE_URL ""
#define PACKAGE "shmtrace"
#define VERSION "0.1.0"
/* end confdefs.h.  */

int
main (void)
{

  ;
  return 0;
}
